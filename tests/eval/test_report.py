"""Report files, history and the regression gate (no search, no Prefect)."""

from __future__ import annotations

import json

import pytest

from kbsync.eval.report import find_baseline, gate_message, summary_markdown, write_report
from kbsync.eval.run import EvalQuery, QueryOutcome, build_result

QUERIES = [EvalQuery(1, "rotate keys", ("s/a.md",)), EvalQuery(2, "忘记密码", ("s/zh.md",))]


def result(ndcg: dict[str, float], *, queries=QUERIES, namespace: str = "ns"):
    """An evaluation whose per-mode nDCG@10 is exactly ``ndcg``."""
    outcomes = []
    for mode, value in ndcg.items():
        for q in queries:
            outcomes.append(QueryOutcome(
                mode=mode, line=q.line, query=q.query, relevant=list(q.relevant),
                top_docs=["s/x.md", *q.relevant], first_relevant_rank=2, hit=1.0 if value else 0.0,
                mrr=0.5, ndcg10=value, recall=1.0, raw_count=40, kept_count=31, latency_ms=3.0))
    return build_result(queries, outcomes, k=5, namespace=namespace,
                        embedding={"provider": "hash", "model": "hash-384", "dimension": 384})


def test_files_latest_and_history_are_written(tmp_path):
    first = write_report(result({"dense": 0.8, "hybrid": 0.9}), tmp_path, margin=0.02)
    report = first.report
    for key in ("per_query_csv", "summary_md", "chart_png", "result_json", "latest_json"):
        assert (tmp_path / report[key].split(str(tmp_path) + "/", 1)[1]).stat().st_size > 0
    with open(report["chart_png"], "rb") as handle:
        assert handle.read(8) == b"\x89PNG\r\n\x1a\n"
    latest = json.loads((tmp_path / "latest.json").read_text(encoding="utf-8"))
    assert latest == json.loads(json.dumps(first.to_dict()))
    assert set(latest) >= {"queries", "k", "namespace", "modes", "report", "regression"}
    assert set(latest["modes"]["dense"]) >= {
        "hit_rate", "mrr", "ndcg@10", "recall@k", "raw_count_mean", "kept_count_mean",
        "latency_ms_p50", "latency_ms_p95"}
    assert latest["regression"]["passed"] and latest["regression"]["baseline"] is None
    csv_text = open(report["per_query_csv"], encoding="utf-8").read()
    assert csv_text.splitlines()[0].startswith("mode,line,query,relevant,top_docs")
    assert "忘记密码" in csv_text and "s/x.md|s/zh.md" in csv_text
    assert "| dense |" in open(report["summary_md"], encoding="utf-8").read()
    history = (tmp_path / "history.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(history) == 1 and json.loads(history[0])["run"] == report["run"]


def test_gate_trips_on_a_drop_beyond_the_margin_only(tmp_path):
    write_report(result({"dense": 0.80, "hybrid": 0.90}), tmp_path)
    small = write_report(result({"dense": 0.79, "hybrid": 0.90}), tmp_path, margin=0.02)
    assert small.regression["passed"]  # -0.01 is within the margin
    drop = write_report(result({"dense": 0.70, "hybrid": 0.95}), tmp_path, margin=0.02)
    reg = drop.regression
    assert not reg["passed"] and not drop.gate_ok
    assert reg["baseline"] == small.report["run"]
    by_mode = {c["mode"]: c for c in reg["compared"]}
    assert by_mode["dense"] == {"mode": "dense", "previous": 0.79, "current": 0.7,
                                "delta": -0.09, "dropped": True}
    assert by_mode["hybrid"]["dropped"] is False
    assert gate_message(reg) == "dense: ndcg@10 0.7900 -> 0.7000 (-0.0900, allowed drop 0.02)"
    assert "FAILED" in summary_markdown(drop)
    # the failed run is recorded but is not the baseline: running again still fails
    again = write_report(result({"dense": 0.70, "hybrid": 0.95}), tmp_path)
    assert not again.regression["passed"]
    assert again.regression["baseline"] == small.report["run"]
    assert json.loads((tmp_path / "latest.json").read_text())["report"]["run"] == \
        again.report["run"]


def test_accepting_a_drop_makes_it_the_new_baseline(tmp_path):
    write_report(result({"dense": 0.8}), tmp_path)
    accepted = write_report(result({"dense": 0.6}), tmp_path, accept=True)
    assert accepted.regression["accepted"] and accepted.gate_ok
    assert "accepted as the new baseline" in summary_markdown(accepted)
    after = write_report(result({"dense": 0.6}), tmp_path)
    assert after.regression["passed"] and after.regression["baseline"] == accepted.report["run"]


def test_only_comparable_runs_are_baselines(tmp_path):
    write_report(result({"dense": 0.9}), tmp_path)
    other_set = [EvalQuery(1, "another question", ("s/a.md",))]
    assert write_report(result({"dense": 0.1}, queries=other_set), tmp_path).regression[
        "baseline"] is None
    assert write_report(result({"dense": 0.1}, namespace="other"), tmp_path).regression[
        "baseline"] is None
    assert not write_report(result({"dense": 0.1}), tmp_path).regression["passed"]


def test_a_previous_history_entry_written_by_hand_is_honoured(tmp_path):
    current = result({"dense": 0.5})
    entry = {"run": "hand-made", "created_at": "2024-01-01T00:00:00+00:00", "namespace": "ns",
             "queries_hash": current.queries_hash, "modes": {"dense": {"ndcg@10": 0.6}},
             "passed": True}
    (tmp_path / "history.jsonl").write_text("not json\n" + json.dumps(entry) + "\n",
                                            encoding="utf-8")
    assert find_baseline(tmp_path, namespace="ns", queries_hash=current.queries_hash)["run"] \
        == "hand-made"
    out = write_report(current, tmp_path, margin=0.05)
    assert not out.regression["passed"] and out.regression["compared"][0]["delta"] == -0.1


def test_negative_margin_is_refused(tmp_path):
    with pytest.raises(ValueError):
        write_report(result({"dense": 0.5}), tmp_path, margin=-0.1)


ORIGINAL = {"logical": "kbsync", "collection": "kbsync", "generation": 0, "since": None,
            "previous": None}
SWAPPED = {"logical": "kbsync", "collection": "kbsync__r1", "generation": 1,
           "since": "2999-01-01T00:00:00+00:00", "previous": "kbsync"}


def test_a_swap_sets_the_new_baseline_and_says_so(tmp_path):
    """After a swap the operator allowed, the first run is the new baseline (not a failure
    every night), its summary names the change; the next runs compare with it (#41)."""
    write_report(result({"dense": 0.9}), tmp_path, serving=ORIGINAL)
    first = write_report(result({"dense": 0.7}), tmp_path, serving=SWAPPED)
    assert first.gate_ok and first.regression["baseline"] is None
    assert first.regression["former"]["compared"][0]["dropped"]  # shown, not gated
    text = summary_markdown(first)
    assert "The active collection changed since the last comparable run" in text
    assert "(it measured `kbsync`; now `kbsync__r1`" in text and "not gated" in text
    history = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert history[-1]["serving"] == SWAPPED
    again = write_report(result({"dense": 0.7}), tmp_path, serving=SWAPPED)
    assert again.gate_ok and again.regression["baseline"] == first.report["run"]
    # A rollback serves the former collection again: its own runs are its baseline.
    back = {**ORIGINAL, "since": "2999-01-02T00:00:00+00:00", "previous": "kbsync__r1"}
    assert write_report(result({"dense": 0.9}), tmp_path, serving=back).regression[
        "baseline"] is None


def test_a_regression_says_what_changed_and_what_to_do(tmp_path):
    from kbsync.eval.report import regression_advice

    write_report(result({"dense": 0.9}), tmp_path, serving=SWAPPED)
    failed = write_report(result({"dense": 0.7}), tmp_path, serving=SWAPPED)
    assert not failed.gate_ok
    advice = regression_advice(failed.regression)
    assert "the active collection kbsync__r1 is the one the baseline run measured" in advice
    assert "accept_regression true" in advice and "kbsync eval --accept" in advice
    assert "rollback deployment with confirm true" in advice and "serve kbsync again" in advice
    assert "## What changed, what to do" in summary_markdown(failed)
    # History from before `serving` was recorded, then a swap: the change is named.
    legacy = tmp_path / "legacy"
    write_report(result({"dense": 0.9}), legacy)
    failed = write_report(result({"dense": 0.7}), legacy, serving=SWAPPED)
    advice = regression_advice(failed.regression)
    assert "kbsync serves from kbsync__r1 since 2999-01-01" in advice, advice
    assert "a rebuild swap, rollback or restore after the baseline run; before: kbsync" in advice
    # Never rebuilt: no rollback offered.
    plain = tmp_path / "plain"
    write_report(result({"dense": 0.9}), plain, serving=ORIGINAL)
    advice = regression_advice(write_report(result({"dense": 0.7}), plain,
                                            serving=ORIGINAL).regression)
    assert "rollback" not in advice and "accept_regression" in advice
