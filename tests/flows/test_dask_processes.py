"""The ingest flow on a local Dask cluster of worker processes gives the thread runner's index.

The embedded store admits one process, so the workers convert, chunk and embed and the
flow's process writes (``flows/executor.py``); the index must not tell the two apart.
"""

from __future__ import annotations

import shutil

import pytest
from prefect.client.orchestration import get_client

from flows.ingest import ingest
from kbsync.runtime import Runtime
from kbsync.settings import Settings
from kbtest import SAMPLE, write_tree

_RUN_FIELDS = ("updated_at", "run_id")  # when and by which run: the only fields that differ


def _share(tmp_path):
    share = tmp_path / "share"
    shutil.copytree(SAMPLE, share)  # every file kind, through the isolated converters
    write_tree(share / "notes", {f"n{i}.md": f"# Note {i}\n\n## Part\n\nBody {i} " * (i + 1)
                                 for i in range(20)})
    return share


def _index(namespace: str) -> tuple[dict, dict]:
    """Every chunk point (payload, dense and sparse vector) by id, and every state record
    without its run fields, by doc_id."""
    runtime = Runtime.open(Settings())
    try:
        points = {p.id: (p.payload, p.vector, p.sparse)
                  for p in runtime.store.scroll(runtime.collection, with_vectors=True)}
        states = {doc_id: {k: v for k, v in state.to_payload().items() if k not in _RUN_FIELDS}
                  for doc_id, state in runtime.states.load(namespace).items()}
    finally:
        runtime.close()
    return points, states


def _task_names(flow_run_id) -> set[str]:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    with get_client(sync_client=True) as client:
        children = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[flow_run_id])))
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(
            id={"any_": [c.id for c in children]}))
    return {r.name for r in runs}


@pytest.mark.slow  # 30-75 s on 4 workers (docs/development.md, Tests)
def test_two_dask_worker_processes_build_the_thread_runners_index(prefect_api, settings,
                                                                   tmp_path, monkeypatch):
    share = _share(tmp_path)
    monkeypatch.setenv("KBSYNC_CONVERT_ISOLATION", "true")  # the default: converter processes
    monkeypatch.setenv("KBSYNC_FILES_PER_BATCH", "4")  # several batches: order and window

    monkeypatch.setenv("KBSYNC_HOME", str(tmp_path / "threads"))
    threads = ingest(roots=[str(share)], namespace="eq")
    want_points, want_states = _index("eq")

    monkeypatch.setenv("KBSYNC_HOME", str(tmp_path / "dask"))
    monkeypatch.setenv("KBSYNC_TASK_RUNNER", "dask")
    monkeypatch.setenv("KBSYNC_TASK_WORKERS", "2")
    state = ingest(roots=[str(share)], namespace="eq", return_state=True)
    assert state.is_completed()
    got = state.result()
    got_points, got_states = _index("eq")

    assert threads["failed"] == got["failed"] == 0
    assert got["added"] == threads["added"] == got["files_seen"] > 20
    assert got["chunks_kept"] == threads["chunks_kept"] == len(want_points)
    assert set(got_points) == set(want_points)
    assert got_points == want_points  # payloads, dense and sparse vectors, point by point
    assert got_states == want_states
    names = _task_names(state.state_details.flow_run_id)
    batches = -(-got["files_seen"] // 4)
    # The CPU half ran as the batch task on a worker, the write as its own task here.
    assert {f"batch share 1/{batches}", f"write share {batches}/{batches}"} <= names

    again = ingest(roots=[str(share)], namespace="eq")  # still on the Dask cluster
    assert again["unchanged"] == again["files_seen"] and again["embeddings_computed"] == 0
    assert _index("eq")[0].keys() == want_points.keys()
