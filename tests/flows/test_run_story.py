"""What an operator reads in a run's log and artifacts, through a real Prefect test server (#25).

- a Failed run names each failed file at WARNING (doc_id, kind, short message, control
  characters escaped), at most 20, then how many more and where the table is;
- a refusal (``RootConflict``) ends the run Failed with its one-line message, no traceback in
  the run's logs, and a summary artifact naming it;
- runs are named after what they ran; ``ingest-root-*`` subflows carry tags; a dry run's
  closing line says "would add".
"""

from __future__ import annotations

import logging
import time
import uuid

import pytest
from prefect.artifacts import Artifact
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, LogFilter, LogFilterFlowRunId

from flows.ingest import ingest
from kbtest import write_tree
from tasks.logs import ENGINE_EXIT, ExpectedRunEnd
from tasks.run_story import escape_controls, failure_lines


def _logs(run_id) -> list[tuple[int, str]]:
    with get_client(sync_client=True) as client:
        logs = client.read_logs(log_filter=LogFilter(
            flow_run_id=LogFilterFlowRunId(any_=[uuid.UUID(str(run_id))])))
    return [(entry.level, entry.message) for entry in logs]


def _run_logs(run_id, until: str) -> list[tuple[int, str]]:
    """The run's stored logs once the line containing ``until`` arrived (the API handler
    ships them in batches, a moment after the run ends)."""
    deadline = time.monotonic() + 30
    while True:
        lines = _logs(run_id)
        if any(until in message for _, message in lines):
            return lines
        assert time.monotonic() < deadline, lines
        time.sleep(0.3)


def _run(state):
    with get_client(sync_client=True) as client:
        return client.read_flow_run(state.state_details.flow_run_id)


def test_a_failed_run_names_each_failed_file_at_warning(prefect_api, settings, tmp_path):
    share = tmp_path / "share"
    write_tree(share, {"good.md": "# Good\n\nFine text.", "empty.md": "",
                       "odd\x1b[31mname.md": ""})
    (share / "broken.pdf").write_bytes(b"%PDF-1.7 this is not really a pdf")
    state = ingest(roots=[str(share)], namespace="story-warn", return_state=True)
    assert state.is_failed() and state.message == "3 of 4 files failed"
    lines = _run_logs(state.state_details.flow_run_id, "Finished in state Failed('3 of 4")
    warnings = [m for level, m in lines if level == logging.WARNING and m.startswith("failed ")]
    assert "failed share/broken.pdf: CorruptDocument: " in "\n".join(warnings), lines
    assert any(m.startswith("failed share/empty.md: EmptyDocument: ") for m in warnings)
    odd = [m for m in warnings if "odd" in m]
    assert odd and "\x1b" not in odd[0] and "odd\\x1b[31mname.md" in odd[0], odd
    assert len(warnings) == 3
    # ... and the closing line counts; the watchdog's hook lines are gone
    assert any(m.startswith("ingest story-warn: added 1,") for _, m in lines), lines
    assert not any("stop_flow_watch" in m for _, m in lines), lines
    # The batch's task page names its failed files in the state message.
    with get_client(sync_client=True) as client:
        (child,) = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            parent_flow_run_id={"any_": [state.state_details.flow_run_id]}))
        batches = [t for t in client.read_task_runs(flow_run_filter=FlowRunFilter(
            id={"any_": [child.id]})) if t.name.startswith("batch ")]
    (batch,) = batches
    assert batch.state.name == "Completed with failures"
    assert batch.state.message.startswith("3 files failed in this batch: share/")
    assert "share/broken.pdf (CorruptDocument)" in batch.state.message


def test_past_twenty_failed_files_one_line_says_how_many_more():
    failures = [{"doc_id": f"s/f{i}.md", "path": f"/x/s/f{i}.md", "error": "EmptyDocument",
                 "message": f"/x/s/f{i}.md: no text"} for i in range(25)]
    lines = failure_lines({"namespace": "ns", "dry_run": False, "failures": failures})
    assert len(lines) == 21
    assert lines[0] == "failed s/f0.md: EmptyDocument: no text"
    assert lines[-1].startswith("... and 5 more failed files: see the table artifact "
                                "kbsync-ingest-failures-ns")


def test_control_characters_are_escaped():
    assert escape_controls("a\nb\x1b[0m\u202ec\x85") == "a\\x0ab\\x1b[0m\\u202ec\\x85"


def test_a_refusal_ends_failed_without_a_traceback_and_with_a_summary(prefect_api, settings,
                                                                      tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    write_tree(one, {"a.md": "# A\n\nText one."})
    write_tree(two, {"b.md": "# B\n\nText two."})
    assert ingest(roots=[f"docs={one}"], namespace="story-refuse", return_state=True).is_completed()
    state = ingest(roots=[f"docs={two}"], namespace="story-refuse", return_state=True)
    assert state.is_failed() and "RootConflict" in state.message, state.message
    lines = _run_logs(state.state_details.flow_run_id, "Finished in state Failed(")
    text = "\n".join(m for _, m in lines)
    assert "Traceback" not in text and 'File "' not in text, text
    assert any("RootConflict" in m and level >= logging.ERROR for level, m in lines), lines
    summary = Artifact.get("kbsync-ingest-story-refuse")
    assert summary.flow_run_id == state.state_details.flow_run_id
    assert "(stopped: RootConflict)" in summary.data and "docs" in summary.data, summary.data


def test_the_engine_line_and_tracebacks_of_an_expected_error_are_cut_unless_debugging():
    from kbsync.errors import InternalError, LockHeld

    def record(exc: BaseException, msg: str) -> logging.LogRecord:
        try:
            raise exc
        except BaseException:
            import sys
            return logging.LogRecord("prefect.flow_runs", logging.ERROR, __file__, 1, msg,
                                     None, sys.exc_info())

    quiet = ExpectedRunEnd()
    assert not quiet.filter(record(LockHeld("held"), ENGINE_EXIT))
    cut = record(LockHeld("held"), "Encountered exception during execution: %r")
    assert quiet.filter(cut) and cut.exc_info is None
    bug = record(InternalError("bug"), ENGINE_EXIT)
    assert quiet.filter(bug) and bug.exc_info is not None
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.DEBUG)
    try:
        kept = record(LockHeld("held"), "Encountered exception during execution: %r")
        assert quiet.filter(kept) and kept.exc_info is not None
    finally:
        root.setLevel(level)


def test_runs_are_named_after_what_they_ran_and_subflows_are_tagged(prefect_api, settings,
                                                                    tmp_path):
    share = tmp_path / "manuals"
    write_tree(share, {f"d{i}.md": f"# Doc {i}\n\nText {i}." for i in range(3)})
    state = ingest(roots=[str(share)], namespace="story-names", dry_run=True, return_state=True)
    assert state.is_completed()
    run = _run(state)
    assert run.name == "ingest: manuals incremental dry-run"
    lines = _run_logs(run.id, "would add")
    assert any(m.startswith("dry run story-names (nothing written): would add 3,")
               for _, m in lines), lines
    with get_client(sync_client=True) as client:
        children = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            parent_flow_run_id={"any_": [run.id]}))
    assert [c.name for c in children] == ["ingest-root-manuals"]
    assert {"root:manuals", "namespace:story-names"} <= set(children[0].tags)


@pytest.mark.parametrize("params, name", [
    ({"roots": ["a=/x/y", "/srv/wiki/"], "mode": "full"}, "ingest: a,wiki full"),
    ({"roots": ["/s"], "force": True, "dry_run": True}, "ingest: s incremental force dry-run"),
])
def test_ingest_names(params, name):
    from tasks.run_names import ingest_name

    assert ingest_name(params) == name


def test_a_sync_with_failed_files_still_emits_the_event_that_starts_evaluation(
        prefect_api, settings, tmp_path):
    """The evaluate deployment's trigger expects ``kbsync.sync.finished``; a run that ended
    Failed only because a file failed (exit 3) emits it, with its flow as related resource."""
    import httpx

    from tasks.events import SYNC_FINISHED

    share = tmp_path / "share"
    write_tree(share, {"good.md": "# Good\n\nFine text.", "empty.md": ""})
    state = ingest(roots=[str(share)], namespace="story-event", return_state=True)
    assert state.is_failed()
    run_id = str(state.state_details.flow_run_id)
    body = {"filter": {"event": {"name": [SYNC_FINISHED]},
                       "any_resource": {"id": [f"kbsync.sync.{run_id}"]}}, "limit": 5}
    deadline = time.monotonic() + 30
    while True:
        events = httpx.post(f"{prefect_api}/events/filter", json=body).json()["events"]
        if events or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(events) == 1, events
    (event,) = events
    assert event["payload"]["failed"] == 1 and event["payload"]["namespace"] == "story-event"
    related = {(r["prefect.resource.role"], r.get("prefect.resource.name"))
               for r in event["related"]}
    assert ("flow", "ingest") in related, related


def test_the_summary_links_its_failures_table():
    from kbsync.ingest.report import summary_markdown
    from kbsync.ingest.summary import IngestSummary

    summary = IngestSummary(run_id="r", namespace="ns", collection="c", mode="full",
                            dry_run=True).to_dict()
    summary.update(failed=1, files_seen=1, failures=[
        {"path": "/s/a.md", "doc_id": "s/a.md", "error": "EmptyDocument", "message": "empty"}])
    text = summary_markdown(summary)
    assert "[`kbsync-dry-run-failures-ns`](/artifacts/key/kbsync-dry-run-failures-ns)" in text


def test_evaluate_and_rebuild_names():
    from tasks.run_names import evaluate_name, rebuild_name

    assert evaluate_name({"namespace": "kb", "modes": ["hybrid", "dense"]}) == \
        "evaluate: kb hybrid,dense"
    assert rebuild_name({"namespace": "kb", "build": {"embed_model": "e5", "chunk_tokens": 200}},
                        "rebuild") == "rebuild: kb chunk_tokens=200 embed_model=e5"
