"""The rebuild runner's rules (kbsync.maintenance.rebuild_runner), each tested once through
the in-process executor, on the embedded engine with hash embeddings.

The ``rebuild`` flow runs the same runner on Prefect tasks
(``tests/flows/test_rebuild_runner_prefect.py``; the CLI's story in
``tests/flows/test_rebuild_cli.py``), so a rule proved here holds for both: the order of
the steps, where the locks go, usage errors before any step, the report, a refusal, and a
failure in the middle that the next run resumes from.
"""

from __future__ import annotations

import json
from contextlib import contextmanager

import pytest

from kbsync.catalog.lock import WriteLocks, ingest_lock
from kbsync.errors import LockHeld, UsageError
from kbsync.maintenance import rebuild_checks as checks
from kbsync.maintenance import rebuild_runner
from kbsync.maintenance.rebuild_plain import InProcess, rebuild_plain
from kbsync.maintenance.rebuild_runner import RebuildRequest, lock_scope, run_rebuild
from kbsync.runtime import Runtime
from kbtest import TOPICS, active_pointer

REPORT_KEYS = {"namespace", "swapped", "plan", "live", "shadow", "decision", "state", "pointer",
               "ingest", "replay", "timings", "duration_s"}


class Recording(InProcess):
    """The in-process executor, recording each step, lock and release in order; it holds
    the lock file alone (a door's decision on the embedded engine)."""

    def __init__(self, settings, *, fail_on: str | None = None) -> None:
        super().__init__(Runtime.open, locks=WriteLocks(settings))
        self.calls: list[str] = []
        self.fail_on = fail_on

    def _note(self, call: str) -> None:
        self.calls.append(call)
        if self.fail_on and call.startswith(self.fail_on):
            raise RuntimeError(f"failed in {call}")

    @contextmanager
    def write_lock(self, settings, namespace):
        with super().write_lock(settings, namespace):
            self.calls.append(f"lock {settings.collection}")
            try:
                yield
            finally:
                self.calls.append(f"unlock {settings.collection}")

    def open_shadow(self, shadow):
        self._note(f"open_shadow {shadow.collection}")
        return super().open_shadow(shadow)

    def check_before_build(self, plan, queries, live, shadow, *, namespace):
        self._note("check_before_build")
        return super().check_before_build(plan, queries, live, shadow, namespace=namespace)

    def prepare_shadow(self, plan, shadow, run_id):
        self._note("prepare_shadow")
        return super().prepare_shadow(plan, shadow, run_id)

    @contextmanager
    def shadow_ingest(self, shadow, *, locked, tags):
        self._note(f"ingest {tags[0]} locked={locked}")
        with super().shadow_ingest(shadow, locked=locked, tags=tags) as executor:
            yield executor

    def evaluate(self, queries, specs, which, live, shadow, *, namespace, k):
        self._note(f"evaluate {which}")
        return super().evaluate(queries, specs, which, live, shadow, namespace=namespace, k=k)

    def state_check(self, plan, live, shadow):
        self._note("state_check")
        return super().state_check(plan, live, shadow)

    def swap(self, plan, target, shadow):
        self._note("swap")
        return super().swap(plan, target, shadow)

    def discard(self, plan, shadow):
        self._note("discard")
        return super().discard(plan, shadow)

    def release(self, live, shadow):
        self.calls.append("release")
        return super().release(live, shadow)


def _request(settings, queries, **changes) -> RebuildRequest:
    values = {"queries_file": queries, "build": {"chunk_tokens": 64, "chunk_overlap": 8},
              **changes}
    return RebuildRequest(settings=settings, **values)


def test_the_steps_run_in_order_under_the_whole_store_lock(live_kb):
    settings, queries, _ = live_kb
    executor = Recording(settings)
    report = run_rebuild(_request(settings, queries), executor)
    assert lock_scope(settings) == "store"
    # Embedded engine: the store's lock from before the open until after the release; the
    # shadow's ingests take none of their own (one lock file: it would wait on ourselves).
    assert executor.calls == [
        "lock kbsync", "open_shadow kbsync__r1", "check_before_build", "prepare_shadow",
        "ingest shadow locked=False", "evaluate live", "evaluate shadow",
        "ingest replay locked=False", "state_check", "swap", "release", "unlock kbsync"]
    assert set(report) == REPORT_KEYS and report["swapped"]
    assert report["decision"]["swap"] and set(report["decision"]["modes"]) == {"dense", "hybrid"}
    assert report["live"]["collection"] == "kbsync"
    assert report["shadow"]["collection"] == "kbsync__r1"
    assert report["state"]["matches"] and set(report["timings"]) == set(rebuild_runner.TIMINGS)
    assert report["ingest"]["default"]["added"] == len(TOPICS)
    assert report["replay"]["default"]["unchanged"] == len(TOPICS)  # nothing changed meanwhile
    assert report["pointer"]["active"] == "kbsync__r1" and report["pointer"]["previous"] == "kbsync"
    assert active_pointer(settings.home)["build"]["chunk_tokens"] == 64
    json.dumps(report)  # the flow's result and the CLI's --json: plain JSON


def test_on_a_server_the_live_locks_cover_replay_check_and_swap(live_kb, monkeypatch):
    """The other scope (a Qdrant server), on the embedded store: the shadow is built under
    its own lock, and the live collection's lock is held from the replay to the swap."""
    settings, queries, _ = live_kb
    monkeypatch.setattr(rebuild_runner, "lock_scope", lambda s: "live")
    executor = Recording(settings)
    assert run_rebuild(_request(settings, queries), executor)["swapped"]
    assert executor.calls == [
        "open_shadow kbsync__r1", "check_before_build", "prepare_shadow",
        "ingest shadow locked=True", "lock kbsync__r1", "unlock kbsync__r1",
        "evaluate live", "evaluate shadow", "lock kbsync",
        "ingest replay locked=False", "state_check", "swap", "unlock kbsync", "release"]


@pytest.mark.parametrize("changes", [
    {"build": {"colour": "blue"}}, {"modes": ("sparse",)}, {"k": 0},
    {"queries_file": "missing.jsonl"}])
def test_usage_errors_come_before_any_step_or_lock(live_kb, changes):
    settings, queries, _ = live_kb
    executor = Recording(settings)
    with pytest.raises(UsageError):
        run_rebuild(_request(settings, queries, **changes), executor)
    assert executor.calls == []


def test_a_rebuild_during_an_ingest_is_lock_held_before_it_opens_anything(live_kb):
    settings, queries, _ = live_kb
    executor = Recording(settings)
    with ingest_lock(settings, "default"):
        with pytest.raises(LockHeld):
            run_rebuild(_request(settings, queries), executor)
    assert executor.calls == []


def test_a_worse_model_is_refused_and_its_shadow_discarded(live_kb):
    settings, queries, _ = live_kb
    executor = Recording(settings)
    report = run_rebuild(_request(settings, queries, build={"embed_dimensions": 4}), executor)
    assert not report["swapped"] and report["pointer"] is None
    assert "discard" in executor.calls and "swap" not in executor.calls
    dense = report["decision"]["modes"]["dense"]
    assert not dense["ok"] and any(r.startswith("dense:") for r in report["decision"]["reasons"])
    assert active_pointer(settings.home) is None  # the live collection still serves
    assert not (settings.store_path / "kbsync__r1").exists()


def _dilute(queries, copies: int):
    """Append ``copies`` x 12 labelled queries whose relevant documents no share holds: they
    score 0.0 on both collections and measure nothing."""
    lines = queries.read_text().splitlines() + [
        json.dumps({"query": f"{topic} guide", "relevant": [f"share/gone/{topic}{i}.md"]})
        for i, topic in enumerate(TOPICS * copies)]
    queries.write_text("\n".join(lines) + "\n")


def test_the_gate_compares_the_measurable_queries_only(live_kb):
    """Issue 37: 60 of 72 queries measure nothing and diluted the mean drop (here 0.07,
    under max-drop 0.1) of a shadow far worse on the 12 that measure (0.42): refused now."""
    settings, queries, _ = live_kb
    _dilute(queries, 5)
    report = run_rebuild(_request(settings, queries, build={"embed_dimensions": 4},
                                  max_drop=0.1), Recording(settings))
    diluted = report["live"]["modes"]["dense"]["ndcg@10"] - report["shadow"]["modes"][
        "dense"]["ndcg@10"]
    assert 0 < diluted < 0.1  # the mean over every query: the old gate swapped this shadow
    decision = report["decision"]
    assert not report["swapped"] and active_pointer(settings.home) is None
    dense = decision["modes"]["dense"]
    assert dense["live"] == 1.0 and dense["delta"] < -0.1 and not dense["ok"]
    assert decision["modes"]["hybrid"]["ok"]
    assert [r for r in decision["reasons"] if r.startswith("dense:")]
    assert decision["gate"] == {"queries": 72, "measured": 12, "left_out": 60, "minimum": 5}
    assert report["live"]["measurable"] == report["shadow"]["measurable"] == list(range(12))
    assert checks.gate_line(decision) == (
        "gate measured on 12 of 72 queries (60 left out: no relevant document in the live "
        "collection; at least 5 needed)")


def test_too_few_measurable_queries_refuse_before_anything_is_built(live_kb):
    settings, queries, _ = live_kb
    lines = queries.read_text().splitlines()[:4]
    queries.write_text("\n".join(lines) + "\n")
    _dilute(queries, 2)  # 4 of 28 measurable, 5 needed
    executor = Recording(settings)
    with pytest.raises(UsageError, match="only 4 of the 28 queries .* at least 5"):
        run_rebuild(_request(settings, queries), executor)
    assert not [c for c in executor.calls if c.startswith(("ingest", "prepare"))]
    assert active_pointer(settings.home) is None


def test_a_failure_in_the_middle_releases_and_the_next_run_resumes(live_kb):
    """Fail-in-the-middle, then run again: nothing swapped, the store closed and its lock
    gone; the second run resumes the shadow the first built (same build settings)."""
    settings, queries, _ = live_kb
    executor = Recording(settings, fail_on="evaluate shadow")
    with pytest.raises(RuntimeError, match="evaluate shadow"):
        run_rebuild(_request(settings, queries), executor)
    assert executor.calls[-2:] == ["release", "unlock kbsync"]
    assert active_pointer(settings.home) is None
    report = rebuild_plain(_request(settings, queries), open_runtime=Runtime.open)
    assert report["swapped"] and report["plan"]["resumed"]
    # The shadow's documents were built by the first run: the second finds them unchanged.
    assert report["ingest"]["default"]["unchanged"] == len(TOPICS)


def test_a_change_on_the_share_after_the_build_is_replayed(live_kb):
    settings, queries, share = live_kb

    class LateChange(Recording):
        def evaluate(self, queries, specs, which, live, shadow, *, namespace, k):
            if which == "shadow":  # between the build and the replay
                (share / "late.md").write_text("# late\n\nA file synced during the rebuild.")
            return super().evaluate(queries, specs, which, live, shadow, namespace=namespace,
                                    k=k)

    report = run_rebuild(_request(settings, queries), LateChange(settings))
    assert report["replay"]["default"]["added"] == 1
    # The replay brought it into the shadow; that the live collection lacks it does not
    # stop the swap (the shadow may hold more than the live collection, never less).
    assert report["swapped"] and report["state"]["matches"]
