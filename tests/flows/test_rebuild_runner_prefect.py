"""The rebuild runner on the Prefect executor: the ``rebuild`` flow, in process, against the
session's Prefect test server (embedded engine, hash embeddings).

The runner's rules are proved once through the in-process executor
(``tests/maintenance/test_rebuild_runner.py``); here the flow runs the same sequence as
tasks and subflows, and gives the same report as the plain call on a copy of the same
store, so the two cannot drift. A refusal ends Completed named ``Refused``.
"""

from __future__ import annotations

import shutil
from contextlib import contextmanager

import pytest
from prefect.client.orchestration import get_client

from kbsync.catalog.lock import WriteLocks
from kbsync.errors import LockHeld
from kbsync.maintenance.rebuild_plain import rebuild_plain
from kbsync.maintenance.rebuild_runner import RebuildRequest
from kbsync.runtime import Runtime
from kbtest import active_pointer

BUILD = {"chunk_tokens": 64, "chunk_overlap": 8}


def test_the_prefect_executor_holds_the_decision_it_is_given(settings):
    """The flow decides (``flow_locks``) and its executor holds that decision for each
    collection the runner locks, deciding nothing itself: here a server's distributed lock,
    held by a writer elsewhere, refuses the live and the shadow lock alike (no Prefect
    server needed: the lock is refused before any request)."""
    from flows.rebuild_executor import PrefectRebuildExecutor

    tries = []

    @contextmanager
    def elsewhere(locked, namespace, *, purpose):
        tries.append((locked.logical_collection, namespace, purpose))
        raise LockHeld("a writer on another machine")
        yield  # pragma: no cover - a generator, for @contextmanager

    server = settings.model_copy(update={"qdrant_url": "http://127.0.0.1:9"})
    shadow = server.model_copy(update={"collection": "kbsync__r1", "active_of": None})
    executor = PrefectRebuildExecutor(locks=WriteLocks(server, elsewhere))
    for collection in (server, shadow):
        with pytest.raises(LockHeld, match="another machine"):
            with executor.write_lock(collection, "default"):
                pytest.fail("the lock held elsewhere was taken")
    assert tries == [("kbsync", "default", "rebuild"), ("kbsync__r1", "default", "rebuild")]


def _runs(parent_id):
    from prefect.client.schemas.filters import (FlowRunFilter, FlowRunFilterId,
                                                FlowRunFilterParentFlowRunId)

    with get_client(sync_client=True) as client:
        tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(
            id=FlowRunFilterId(any_=[parent_id])))
        children = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[parent_id])))
    return {t.name for t in tasks}, children


def _same(report: dict) -> dict:
    """The report without what differs between two runs of one rebuild (times, ids)."""
    evals = {side: {mode: {k: v for k, v in m.items() if not k.startswith("latency")}
                    for mode, m in report[side]["modes"].items()}
             for side in ("live", "shadow")}
    counts = {which: {ns: {k: v for k, v in s.items() if k in (
        "files_seen", "added", "updated", "unchanged", "deleted", "failed", "chunks_kept")}
        for ns, s in report[which].items()} for which in ("ingest", "replay")}
    return {"swapped": report["swapped"], "decision": report["decision"], "state": report["state"],
            "evals": evals, **counts,
            "plan": {k: v for k, v in report["plan"].items() if k not in ("roots",)}}


@pytest.mark.slow
def test_the_flow_and_the_plain_call_give_one_report(prefect_api, live_kb, tmp_path):
    from flows.rebuild import rebuild

    settings, queries, _ = live_kb
    twin = tmp_path / "twin"
    shutil.copytree(settings.home, twin)  # the same live store, for the plain call
    state = rebuild(queries_file=str(queries), build=BUILD, return_state=True)
    assert state.is_completed() and state.name == "Completed", state.message
    report = state.result()
    plain = rebuild_plain(RebuildRequest(settings=settings.model_copy(update={"home": twin}),
                                         queries_file=queries, build=BUILD),
                          open_runtime=Runtime.open)
    assert report["swapped"] and _same(report) == _same(plain)
    assert active_pointer(settings.home)["active"] == "kbsync__r1"
    assert active_pointer(twin)["active"] == "kbsync__r1"
    tasks, children = _runs(state.state_details.flow_run_id)
    # Each step a task of the flow run; each shadow ingest's root with work to do an
    # ingest-root subflow tagged as the build. The replay finds the share unchanged since
    # the build: a root with nothing to write runs in the flow run itself (issue 42), no
    # subflow, and its counts are in the report.
    assert {"check-before-build", "prepare-shadow", "evaluate-live", "evaluate-shadow",
            "state-check", "swap"} <= tasks and "discard-shadow" not in tasks
    assert sorted(tuple(sorted({"shadow", "replay"} & set(c.tags))) for c in children) == [
        ("shadow",)]
    replay = report["replay"]["default"]
    assert replay["unchanged"] == replay["files_seen"] > 0
    assert replay["added"] == replay["updated"] == replay["deleted"] == 0
    assert all({"namespace:default", "root:share"} <= set(c.tags) for c in children)


@pytest.mark.slow
def test_a_refused_rebuild_ends_completed_named_refused(prefect_api, live_kb):
    from flows.rebuild import rebuild

    settings, queries, _ = live_kb
    state = rebuild(queries_file=str(queries), build={"embed_dimensions": 4},
                    modes=["dense"], return_state=True)
    assert state.is_completed() and state.name == "Refused"
    report = state.result()
    assert not report["swapped"] and report["pointer"] is None
    assert state.message == "; ".join(report["decision"]["reasons"])
    tasks, _ = _runs(state.state_details.flow_run_id)
    assert "discard-shadow" in tasks and "swap" not in tasks
    assert active_pointer(settings.home) is None
