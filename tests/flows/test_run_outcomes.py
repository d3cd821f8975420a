"""A runs list that is red only when something is new, refusals in one line (issue 41).

Through a real Prefect test server:
- a run whose only failed files failed in the namespace's last run too (known failures)
  ends ``Completed with known failures``; a new failed file makes it Failed; its
  ``ingest-root`` subflow is never Failed for files (the parent decides, once);
- the run's log and summary name the embedding model, the summary's outcome heads its
  title and its description (the summary key's history), and the failures table keeps
  each message whole under a plain-words description;
- a refusal (``RootConflict``, ``MassDeleteRefused``) is exactly one ERROR line in the
  run's logs (its subflows' included), ``KIND: message``, not a Python repr;
- a deployment run's ``MassDeleteRefused`` names the form's ``allow_mass_delete``;
- a rebuild refused before its build is one ERROR line too.
"""

from __future__ import annotations

import logging
import time
import uuid

import pytest

from prefect.artifacts import Artifact
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, LogFilter, LogFilterFlowRunId
from prefect.client.schemas.objects import StateType

from flows.ingest import ingest
from kbsync.ingest.report import NEXT_STEP, artifact_key
from kbtest import write_tree
from tasks.artifacts import failures_description

BROKEN = b"%PDF-1.7 this is not really a pdf"


def _children(run_id) -> list:
    with get_client(sync_client=True) as client:
        return client.read_flow_runs(flow_run_filter=FlowRunFilter(
            parent_flow_run_id={"any_": [run_id]}))


def _logs(run_id, until: str) -> list[tuple[int, str]]:
    """The stored logs of the run and its subflows once a line containing ``until`` came."""
    ids = [uuid.UUID(str(run_id))] + [c.id for c in _children(run_id)]
    deadline = time.monotonic() + 30
    while True:
        with get_client(sync_client=True) as client:
            logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(
                any_=ids)))
        lines = [(entry.level, entry.message) for entry in logs]
        if any(until in message for _, message in lines):
            return lines
        assert time.monotonic() < deadline, lines
        time.sleep(0.3)


@pytest.mark.slow  # three runs and their logs: ~25 s
def test_known_failures_are_not_red_and_a_new_one_is(prefect_api, settings, tmp_path):
    share = tmp_path / "share"
    write_tree(share, {"good.md": "# Good\n\nFine text."})
    (share / "broken.pdf").write_bytes(BROKEN)
    first = ingest(roots=[str(share)], namespace="known", return_state=True)
    assert first.is_failed() and first.message == "1 of 2 files failed"  # new: red
    second = ingest(roots=[str(share)], namespace="known", return_state=True)
    assert second.type is StateType.COMPLETED, second
    assert second.name == "Completed with known failures", second
    assert second.result()["failed"] == 1  # the summary still counts it
    lines = _logs(second.state_details.flow_run_id, "Finished in state Completed with known")
    assert any(level == logging.WARNING and m.startswith("failed share/broken.pdf:") and
               m.endswith("(known: it failed in the last run too)") for level, m in lines)
    assert any(m == "embedding model: hash/hash-384 (384 dims)" for _, m in lines), lines
    assert second.result()["failed_remembered"] == 1  # not converted again (issue 42)
    # A subflow's failure shows once, on its parent: no ingest-root subflow is Failed. The
    # second run has nothing to write (the failure is remembered): no subflow at all.
    (child,) = _children(first.state_details.flow_run_id)
    assert child.state.type is StateType.COMPLETED, child.state
    assert child.state.name == "Completed with failures", child.state
    assert _children(second.state_details.flow_run_id) == []
    summary = Artifact.get(artifact_key("kbsync-ingest", "known"))
    assert summary.description.startswith("completed: 1 known failed file (none new): ")
    assert "| outcome | completed: 1 known failed file (none new) |" in summary.data
    assert "| embedding model | hash/hash-384 (384 dims) |" in summary.data
    assert NEXT_STEP in summary.data
    table = Artifact.get(artifact_key("kbsync-ingest-failures", "known"))
    assert table.description == ("1 file failed in the last ingest of namespace known; fix "
                                 "or remove each one (the next run retries it)")
    # A new broken file: red again, and the message says how many are new.
    (share / "other.pdf").write_bytes(BROKEN)
    third = ingest(roots=[str(share)], namespace="known", return_state=True)
    assert third.is_failed() and third.message == "2 of 3 files failed (1 new)", third
    summary = Artifact.get(artifact_key("kbsync-ingest", "known"))
    assert summary.description.startswith("failed: 1 new failed file, 1 known: ")


def _one_error(run_id, kind: str) -> str:
    lines = _logs(run_id, "Finished in state Failed(")
    errors = [m for level, m in lines if level >= logging.ERROR]
    assert len(errors) == 1, lines
    (line,) = errors
    assert line.startswith(f"{kind}: ") and f"{kind}('" not in line, line
    assert not any(f"{kind}('" in m for _, m in lines), lines  # no repr at any level
    return line


def test_a_refusal_is_one_error_line(prefect_api, settings, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    write_tree(one, {"a.md": "# A\n\nText one.", "b.md": "# B\n\nText b."})
    write_tree(two, {"c.md": "# C\n\nText two."})
    assert ingest(roots=[f"docs={one}"], namespace="refuse-once",
                  return_state=True).is_completed()
    conflict = ingest(roots=[f"docs={two}"], namespace="refuse-once", return_state=True)
    assert conflict.is_failed() and conflict.message.startswith("RootConflict: ")
    _one_error(conflict.state_details.flow_run_id, "RootConflict")
    for path in one.iterdir():
        path.unlink()
    mass = ingest(roots=[f"docs={one}"], namespace="refuse-once", mode="full",
                  return_state=True)
    assert mass.is_failed()
    line = _one_error(mass.state_details.flow_run_id, "MassDeleteRefused")
    assert "--allow-mass-delete" in line  # not a deployment run: the CLI's words
    summary = Artifact.get(artifact_key("kbsync-ingest", "refuse-once"))
    assert summary.description.startswith("stopped: MassDeleteRefused: ")
    assert "| stopped: MassDeleteRefused |" in summary.data


def test_a_deployment_run_names_the_form_parameter(prefect_api, settings, tmp_path):
    """A run of a deployment (as a worker runs it: the flow engine on a flow run made from
    the deployment) reads ``allow_mass_delete``, the run form's field, not the CLI flag."""
    from prefect.flow_engine import run_flow

    share = tmp_path / "share"
    write_tree(share, {"a.md": "# A\n\nText one."})
    assert ingest(roots=[f"docs={share}"], namespace="form-words",
                  return_state=True).is_completed()
    (share / "a.md").unlink()
    params = {"roots": [f"docs={share}"], "namespace": "form-words", "mode": "full"}
    with get_client(sync_client=True) as client:
        flow_id = client.create_flow_from_name("ingest")
        deployment_id = client.create_deployment(flow_id=flow_id, name="form-words-test",
                                                 entrypoint="flows/ingest.py:ingest")
        flow_run = client.create_flow_run_from_deployment(deployment_id, parameters=params)
    state = run_flow(ingest, flow_run=flow_run, parameters=params, return_type="state")
    assert state.is_failed(), state
    line = _one_error(flow_run.id, "MassDeleteRefused")
    assert "allow_mass_delete" in line and "--allow-mass-delete" not in line, line
    assert "run form" in line, line


def test_the_failures_table_description_in_plain_words():
    none = {"namespace": "kb", "dry_run": False, "failures": []}
    assert failures_description(none) == ("no file failed in the last ingest of namespace kb: "
                                          "the table is empty")
    two = {**none, "failures": [{}, {}]}
    assert failures_description(two).startswith("2 files failed in the last ingest of ")
    assert "empty: none" not in failures_description(two)


def test_a_rebuild_refused_before_the_build_is_one_error_line(prefect_api, settings, tmp_path):
    """``MassDeleteRefused`` from the rebuild's check-before-build task: the task ends
    Refused, the flow Failed with one ``KIND: message`` ERROR line; nothing was built."""
    from flows.rebuild import rebuild
    from kbtest import topic_queries, topic_share

    share, other = topic_share(tmp_path / "share"), topic_share(tmp_path / "other")
    first = ingest(roots=[f"share={share}", f"other={other}"], namespace="rebuild-refused",
                   return_state=True)
    assert first.is_completed(), first
    for path in sorted(other.rglob("*.md")):  # unmounted: an empty folder
        path.unlink()
    state = rebuild(queries_file=str(topic_queries(tmp_path / "q.jsonl")),
                    namespace="rebuild-refused", return_state=True)
    assert state.is_failed() and state.message.startswith("MassDeleteRefused: "), state
    line = _one_error(state.state_details.flow_run_id, "MassDeleteRefused")
    assert "root other" in line and "nothing was built" in line, line
    with pytest.raises(Exception) as raised:  # as the CLI sees it: the error itself
        state.result()
    assert type(raised.value).__name__ == "MassDeleteRefused"
