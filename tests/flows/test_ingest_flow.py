"""The ingest flow under a real Prefect server: DAG, summary, artifacts, final state."""

from __future__ import annotations

import shutil

import pytest
from prefect.client.orchestration import get_client

from kbtest import SAMPLE, write_tree
from flows.ingest import ingest
from kbsync.errors import UsageError
from kbsync.ingest.report import artifact_key


def _artifacts(key: str):
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        return client.read_artifacts(artifact_filter=ArtifactFilter(
            key=ArtifactFilterKey(any_=[key])))


def _task_names(flow_run_id) -> set[str]:
    from prefect.client.schemas.filters import (FlowRunFilter, FlowRunFilterId,
                                               FlowRunFilterParentFlowRunId)

    with get_client(sync_client=True) as client:
        children = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[flow_run_id])))
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(
            id=FlowRunFilterId(any_=[c.id for c in children] + [flow_run_id])))
    return {r.name for r in runs}


def test_ingest_sample_then_rerun_is_unchanged(prefect_api, settings, tmp_path, monkeypatch):
    monkeypatch.setenv("KBSYNC_CONVERT_ISOLATION", "true")  # the default: worker processes
    share = tmp_path / "sample"
    shutil.copytree(SAMPLE, share)
    state = ingest(roots=[str(share)], namespace="flow-test", return_state=True)
    assert state.is_completed()
    first = state.result()
    assert first["files_seen"] == first["added"] > 10
    assert first["failed"] == 0 and first["chunks_kept"] > 0
    assert first["embeddings_computed"] == first["chunks_kept"]
    names = _task_names(state.state_details.flow_run_id)
    # Task runs are named after their root and batch, so a graph of many batches reads. A
    # root's first plan runs in the flow run itself (issue 42: so a root with nothing to
    # write opens no subflow), so there is no "plan sample" task for a root of one slice.
    assert {"batch sample 1/1", "finish-root sample", "check-identity"} <= names
    assert "plan sample" not in names
    summary_artifacts = _artifacts(artifact_key("kbsync-ingest", "flow-test"))
    assert summary_artifacts and "files_seen" in summary_artifacts[0].data

    again = ingest(roots=[str(share)], namespace="flow-test", return_state=True)
    second = again.result()
    assert second["unchanged"] == second["files_seen"] == first["files_seen"]
    assert second["embeddings_computed"] == 0 and second["added"] == second["updated"] == 0
    assert second["roots"] == ["sample"]
    # A no-op: no subflow, no task per root or batch; the run's checks only, and its summary
    # artifact written once.
    run_id = again.state_details.flow_run_id
    assert _children(run_id) == []
    assert _task_names(run_id) == {"check-identity", "record-identity", "check-collection",
                                   "seal-store"}
    assert len(_artifacts(artifact_key("kbsync-ingest", "flow-test"))) == \
        len(summary_artifacts) + 1


def _children(flow_run_id) -> list:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    with get_client(sync_client=True) as client:
        return client.read_flow_runs(flow_run_filter=FlowRunFilter(
            parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[flow_run_id])))


def test_a_failing_file_fails_the_run_but_not_the_others(prefect_api, settings, tmp_path,
                                                         monkeypatch):
    monkeypatch.setenv("KBSYNC_CONVERT_ISOLATION", "true")  # the default: worker processes
    share = tmp_path / "share"
    write_tree(share, {"good.md": "# Good\n\nFine text.", "ok.txt": "plain text here"})
    (share / "broken.pdf").write_bytes(b"%PDF-1.7 this is not really a pdf")
    state = ingest(roots=[str(share)], namespace="flow-fail", return_state=True)
    assert state.is_failed()
    summary = state.result(raise_on_failure=False).result  # FilesFailed carries the summary
    assert summary["added"] == 2 and summary["failed"] == 1
    assert summary["failures"][0]["doc_id"] == "share/broken.pdf"
    assert summary["failures"][0]["error"] == "CorruptDocument"
    table = _artifacts(artifact_key("kbsync-ingest-failures", "flow-fail"))
    assert table and "broken.pdf" in str(table[0].data)


def test_missing_root_fails_before_any_work(prefect_api, settings, tmp_path):
    state = ingest(roots=[str(tmp_path / "nope")], return_state=True)
    assert state.is_failed()
    with pytest.raises(UsageError, match="does not exist"):
        state.result()


def test_invalid_parameters_are_rejected_before_a_run(prefect_api, settings, tmp_path):
    from prefect.exceptions import ParameterTypeError

    with pytest.raises(ParameterTypeError):
        ingest(roots=[str(tmp_path)], mode="sideways")
    with pytest.raises(ParameterTypeError):
        ingest(roots=[], namespace="x")


def test_dask_task_runner_gives_the_same_result(prefect_api, settings, tmp_path, monkeypatch):
    share = tmp_path / "share"
    write_tree(share, {f"d{i}.md": f"# Doc {i}\n\nBody {i} text." for i in range(40)})
    monkeypatch.setenv("KBSYNC_TASK_RUNNER", "dask")
    monkeypatch.setenv("KBSYNC_TASK_WORKERS", "2")
    monkeypatch.setenv("KBSYNC_FILES_PER_BATCH", "8")
    summary = ingest(roots=[str(share)], namespace="dask")
    assert summary["added"] == summary["files_seen"] == 40 and summary["failed"] == 0
    again = ingest(roots=[str(share)], namespace="dask")
    assert again["unchanged"] == 40 and again["embeddings_computed"] == 0


def test_failures_artifact_is_emptied_by_a_clean_run_and_dry_runs_keep_their_own_keys(
        prefect_api, settings, tmp_path):
    share = tmp_path / "share"
    write_tree(share, {"good.md": "# Good\n\nFine text."})
    broken = share / "broken.pdf"
    broken.write_bytes(b"%PDF-1.7 this is not really a pdf")
    assert ingest(roots=[str(share)], namespace="art", return_state=True).is_failed()
    failures_key = artifact_key("kbsync-ingest-failures", "art")
    (first,) = _artifacts(failures_key)
    assert "broken.pdf" in str(first.data) and str(broken) + ":" not in str(first.data)
    broken.unlink()
    dry = ingest(roots=[str(share)], namespace="art", dry_run=True)
    assert dry["dry_run"] is True
    assert _artifacts(artifact_key("kbsync-dry-run", "art"))
    assert len(_artifacts(failures_key)) == 1  # the dry run did not touch the sync history
    ingest(roots=[str(share)], namespace="art")
    latest = max(_artifacts(failures_key), key=lambda a: a.created)
    assert latest.data in ([], "[]")  # clean run: the old failure no longer stands
    summary = max(_artifacts(artifact_key("kbsync-ingest", "art")), key=lambda a: a.created)
    assert "(ok)" in summary.data


def test_a_root_in_slices_runs_slice_by_slice_in_the_graph(prefect_api, settings, tmp_path,
                                                            monkeypatch):
    """A root planned 2 files at a time: a plan task run per slice, batches numbered through
    the root (``+`` while slices remain), one summary, and full mode's deletion found by the
    last slice (tests/ingest/test_plan_slices.py checks the index against a whole plan)."""
    monkeypatch.setenv("KBSYNC_PLAN_SLICE_FILES", "2")
    monkeypatch.setenv("KBSYNC_FILES_PER_BATCH", "1")
    share = tmp_path / "share"
    write_tree(share, {f"n{i}.md": f"# Note {i}\n\nbody {i}" for i in range(5)})
    state = ingest(roots=[str(share)], namespace="slices", return_state=True)
    first = state.result()
    assert (first["files_seen"], first["added"], first["failed"]) == (5, 5, 0)
    assert first["roots"] == ["share"]
    names = _task_names(state.state_details.flow_run_id)
    assert {"batch share 1/2+", "batch share 3/4+", "batch share 5/5", "plan share"} <= names
    (share / "n3.md").unlink()
    second = ingest(roots=[str(share)], namespace="slices", mode="full")
    assert (second["unchanged"], second["deleted"], second["added"]) == (4, 1, 0)
