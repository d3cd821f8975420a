"""A sync with nothing to do costs its plan and no root run (issue 42).

The runner plans each root's slices in the run's own step (:meth:`Executor.here`) while they
are idle (:func:`kbsync.ingest.runner.is_idle`); only a slice with work, and those after it,
go to the root's own run (``run_root``: an ``ingest-root`` subflow in Prefect). The summary
is the same either way: every file counted once, the root named once.
"""

from __future__ import annotations

import os
from dataclasses import replace

from kbtest import recording_executor, write_tree
from kbsync.ingest.discover import parse_root
from kbsync.ingest.runner import IngestRequest, is_idle, run_ingest
from kbsync.models import SyncMode


def _share(tmp_path, count: int = 2):
    share = tmp_path / "share"
    write_tree(share, {f"d{i}.md": f"# Doc {i}\n\nbody {i}" for i in range(count)})
    return share


def _commits(runtime, monkeypatch) -> list[str]:
    """What the run writes to the state collection (empty commits are not writes)."""
    wrote: list[str] = []
    states = runtime.states
    commit, write_meta = states.commit, states.write_meta

    def counted_commit(records, *args, **kwargs):
        if list(records):
            wrote.append("commit")
        return commit(records, *args, **kwargs)

    def counted_meta(*args, **kwargs):
        wrote.append("meta")
        return write_meta(*args, **kwargs)
    monkeypatch.setattr(states, "commit", counted_commit)
    monkeypatch.setattr(states, "write_meta", counted_meta)
    return wrote


def test_a_no_op_runs_no_root_run_and_writes_no_state(runtime, tmp_path, monkeypatch):
    request = IngestRequest(roots=(parse_root(str(_share(tmp_path))),), mode=SyncMode.FULL)
    first = run_ingest(request, recording_executor(runtime))
    assert first.added == 2
    wrote = _commits(runtime, monkeypatch)
    executor = recording_executor(runtime)
    again = run_ingest(replace(request, run_id="second"), executor)
    assert executor.roots == []  # no root run: no subflow, no task per root or batch
    assert executor.ran == ["check_identity", "preflight", "record_identity", "check_collection",
                            "seal_store", "here:plan", "here:finish_root"]
    assert (again.files_seen, again.unchanged, again.added, again.updated, again.deleted) == \
        (2, 2, 0, 0, 0)
    assert again.roots == ["share"] and again.failed == 0
    # the capture mark and the root's listing (kbsync.ingest.listing) are written by the
    # first run, which wrote every file whole: a no-op writes nothing at all
    assert wrote == []
    third = run_ingest(replace(request, run_id="third"), recording_executor(runtime))
    assert (third.unchanged, third.failed) == (2, 0) and wrote == []


def test_idle_slices_stay_in_the_run_and_the_first_with_work_goes_to_the_root_run(
        runtime, tmp_path):
    share = _share(tmp_path, 6)
    request = IngestRequest(roots=(parse_root(str(share)),))
    assert run_ingest(request, recording_executor(runtime, files_per_slice=2)).added == 6
    (share / "d4.md").write_text("# Doc 4\n\nbody 4, edited")
    executor = recording_executor(runtime, files_per_slice=2)
    again = run_ingest(replace(request, run_id="second"), executor)
    assert executor.roots == ["share"]
    # slices d0-d1 and d2-d3 are idle (planned and finished here); d4-d5 has work: its plan
    # is handed to the root's run, which plans the (empty) slice after it as before
    checks = ["check_identity", "record_identity", "check_collection", "seal_store"]
    assert executor.ran == [*checks, "here:plan", "here:finish_root", "here:plan",
                            "here:finish_root", "here:plan", "plan", "batch", "finish_root",
                            "finish_root"]
    assert (again.files_seen, again.unchanged, again.updated, again.added) == (6, 5, 1, 0)
    assert again.roots == ["share"]


def test_a_touched_file_is_not_idle_its_stat_is_refreshed_in_the_root_run(runtime, tmp_path):
    share = _share(tmp_path)
    request = IngestRequest(roots=(parse_root(str(share)),))
    run_ingest(request, recording_executor(runtime))
    stat = (share / "d1.md").stat()
    os.utime(share / "d1.md", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    executor = recording_executor(runtime)
    again = run_ingest(replace(request, run_id="second"), executor)
    assert executor.roots == ["share"] and again.unchanged == 2
    # refreshed: the next run is idle again
    executor = recording_executor(runtime)
    run_ingest(replace(request, run_id="third"), executor)
    assert executor.roots == []


def test_a_dry_run_of_a_changed_root_still_plans_in_the_root_run(runtime, tmp_path):
    share = _share(tmp_path)
    request = IngestRequest(roots=(parse_root(str(share)),))
    run_ingest(request, recording_executor(runtime))
    (share / "new.md").write_text("# New\n\nnew body")
    executor = recording_executor(runtime)
    planned = run_ingest(replace(request, run_id="dry", dry_run=True), executor)
    assert executor.roots == ["share"] and planned.added == 1 and planned.unchanged == 2


def test_is_idle_reads_the_plan_only(runtime, tmp_path):
    from kbsync.ingest import steps
    from kbsync.ingest.plan import DeleteGuard

    share = _share(tmp_path)
    spec = parse_root(str(share))

    def plan():
        return steps.plan(runtime, spec, "default", SyncMode.INCREMENTAL, False, (), (),
                          DeleteGuard())
    assert not is_idle(plan())  # nothing indexed yet: every file is new
    run_ingest(IngestRequest(roots=(spec,)), recording_executor(runtime))
    assert is_idle(plan())
