"""The rebuild summary an operator reads (#25): settings as a table (live as built against the
shadow's, changed rows marked), the decision, the state check, the build and replay counts,
and the rollback command."""

from __future__ import annotations

from tasks.rebuild_story import rebuild_markdown

COUNTS = {"files_seen": 15, "added": 15, "updated": 0, "unchanged": 0, "deleted": 0, "failed": 0}


def _report(swapped: bool) -> dict:
    return {
        "namespace": "default", "swapped": swapped, "duration_s": 12.5,
        "timings": {"build_s": 8.0, "eval_s": 3.0, "swap_s": 1.5},
        "plan": {"logical": "kb", "live": "kb", "shadow": "kb__r1", "resumed": False,
                 "live_build": {"chunk_tokens": 256, "embed_model": "all-MiniLM-L6-v2"},
                 "target_build": {"chunk_tokens": 200, "embed_model": "all-MiniLM-L6-v2"}},
        "decision": {"swap": swapped, "reasons": ["hybrid: 0.750 -> 0.760 (+0.010)"],
                     "modes": {"hybrid": {"live": 0.75, "shadow": 0.76, "delta": 0.01,
                                          "ok": True}}},
        "state": {"matches": swapped, "pending": [] if swapped else ["default:s/a.md"],
                  "pending_count": 0 if swapped else 1, "missing": [], "missing_count": 0,
                  "mass_delete": [], "roots_changed": []},
        "ingest": {"default": COUNTS},
        "replay": {"default": {**COUNTS, "added": 0, "unchanged": 14, "updated": 1}},
    }


def test_a_swap_summary_tells_the_whole_story():
    text = rebuild_markdown(_report(swapped=True))
    assert text.startswith("# kbsync rebuild of kb: swapped")
    assert "{" not in text  # no raw Python dicts
    assert "| chunk_tokens | 256 | 200 | **changed** |" in text
    assert "| embed_model | all-MiniLM-L6-v2 | all-MiniLM-L6-v2 |  |" in text
    unset = rebuild_markdown({**_report(True), "plan": {**_report(True)["plan"],
                                                         "live_build": {"chunk_tokens": None}}})
    assert "| chunk_tokens | default | 200 | **changed** |" in unset
    assert "The shadow holds what the shares hold: **yes**" in text
    replay = text.split("## Replay", 1)[1]
    assert "| default | 15 | 0 | 1 | 14 | 0 | 0 |" in replay
    assert "The next `evaluate` run measures `kb__r1` and becomes the regression gate's new " \
        "baseline" in text
    # The undo names what a rollback serves again, never "points kb back to kb" (#41).
    assert "back to `kb`" not in text
    assert ("`kbsync rebuild --rollback`, or the `rollback/rollback` deployment with `confirm` "
            "true, makes `kb` serve its original build again (collection `kb`") in text
    later = {**_report(True), "plan": {**_report(True)["plan"], "live": "kb__r1",
                                       "shadow": "kb__r2"}}
    assert "makes `kb` serve `kb__r1` again" in rebuild_markdown(later)
    none = {**_report(True), "pointer": {"previous": None}}
    assert "There is no previous collection of `kb` to roll back to." in rebuild_markdown(none)


def test_a_setting_left_to_its_default_is_compared_as_measured():
    """384 against an unset dimension whose model gives 384 is no change (#41)."""
    report = _report(True)
    report["plan"]["live_build"]["embed_dimensions"] = 384
    report["plan"]["target_build"]["embed_dimensions"] = None
    report["live"] = {"embedding": {"dimension": 384}}
    report["shadow"] = {"embedding": {"dimension": 384}}
    assert "| embed_dimensions | 384 | default (384) |  |" in rebuild_markdown(report)
    report["shadow"] = {"embedding": {"dimension": 768}}
    assert ("| embed_dimensions | 384 | default (768) | **changed** |"
            in rebuild_markdown(report))


def test_the_gate_says_when_max_drop_was_overridden():
    report = _report(True)
    report["decision"]["max_drop"] = 1.0
    assert "max_drop **1, overridden** (default 0.02)" in rebuild_markdown(report)
    report["decision"]["max_drop"] = 0.02
    text = rebuild_markdown(report)
    assert "max_drop 0.02 (the default)" in text and "overridden" not in text


def test_a_refusal_names_what_the_state_check_found_and_offers_no_rollback():
    text = rebuild_markdown(_report(swapped=False))
    assert "refused (live collection kept)" in text
    assert "**no**" in text and "1 documents still to sync into the shadow: default:s/a.md" in text
    assert "--rollback" not in text
