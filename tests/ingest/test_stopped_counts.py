"""The JSON counts of a refused or stopped run say what was reached, and count the rest
apart (issue 37).

Before: a ``--force`` run refused by full mode's guard in a later slice reported
``files_seen 0`` after rewriting four slices (the root's counts never rode on the
exception), and ``DiskFull`` counted documents it never began as ``failed``. Now the
root's counts travel with any exception, the batch at work when the run stopped is
``failed``, and what was planned but never begun is ``not_attempted``:
``added + updated + unchanged + failed + not_attempted == files_seen``.

Real store, real files, hash embeddings; the refusal and the full disk come from the
real guard and the real ``DiskFull``, triggered mid-run through the step they live in.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kbsync.embed import clear_service_cache
from kbsync.errors import DiskFull, ErrorCode, MassDeleteRefused
from kbsync.ingest import steps
from kbsync.ingest.discover import parse_root
from kbsync.ingest.plan import DeleteGuard
from kbsync.ingest.runner import run_plain
from kbsync.ingest.summary import IngestSummary, Tally, counts_of
from kbsync.models import SyncMode
from kbsync.runtime import Runtime
from kbsync.settings import Settings
from kbsync.store.edge import diskspace
from kbtest import FAST


def _adds_up(counts: dict) -> bool:
    return counts["added"] + counts["updated"] + counts["unchanged"] + counts["failed"] \
        + counts["not_attempted"] == counts["files_seen"]


@pytest.fixture
def runtime(tmp_path, monkeypatch):
    for key in [k for k in __import__("os").environ if k.upper().startswith("KBSYNC_")]:
        monkeypatch.delenv(key)
    for key, value in {**FAST, "KBSYNC_HOME": str(tmp_path / "home"),
                       "KBSYNC_PLAN_SLICE_FILES": "10", "KBSYNC_FILES_PER_BATCH": "5"}.items():
        monkeypatch.setenv(key, value)
    runtime = Runtime.open(Settings())
    try:
        yield runtime
    finally:
        runtime.close()
        clear_service_cache()


def _share(root, n: int):
    root.mkdir(exist_ok=True)
    for i in range(n):
        (root / f"d{i:03d}.md").write_text(f"# Doc {i}\n\nText {i} about rotating keys.\n")


def test_a_refusal_after_slices_were_written_reports_them(tmp_path, runtime, monkeypatch):
    share = tmp_path / "share"
    _share(share, 100)
    assert run_plain([parse_root(str(share))], runtime=runtime).added == 100
    real_plan, calls = steps.plan, [0]

    def plan_while_files_go(*args, **kwargs):
        # Before the 6th slice is planned, 40 files of the later slices go (another process
        # removes them): the last slice's plan sees 40% gone, over the guard's 30%.
        calls[0] += 1
        if calls[0] == 6:
            for i in range(60, 100):
                (share / f"d{i:03d}.md").unlink()
        return real_plan(*args, **kwargs)

    monkeypatch.setattr(steps, "plan", plan_while_files_go)

    with pytest.raises(MassDeleteRefused, match="would delete 40 of 100") as caught:
        run_plain([parse_root(str(share))], runtime=runtime, mode=SyncMode.FULL, force=True,
                  guard=DeleteGuard(max_delete_fraction=0.3))

    counts = counts_of(caught.value)
    assert counts is not None and _adds_up(counts), counts
    # Slices 1-5 rewritten; slice 6 (d050-d059, full: the walk learns only after it that
    # nothing follows) planned, never begun: the plain loop plans the next slice before it
    # processes one, and the 7th, empty and last, refused first.
    assert (counts["files_seen"], counts["updated"], counts["failed"],
            counts["not_attempted"]) == (60, 50, 0, 10), counts
    assert counts["roots"] == ["share"] and counts["failures"] == []
    assert any(w.startswith("10 planned file(s) not attempted: the run stopped before their "
                            "batch (MassDeleteRefused: ") for w in counts["warnings"])


def test_disk_full_counts_what_it_never_began_apart(tmp_path, runtime, monkeypatch):
    share = tmp_path / "share"
    _share(share, 50)  # 5 slices of 10, 2 batches of 5 each
    real_room, calls = diskspace.room, [0]

    def room_until_the_fifth_batch(*args, **kwargs):
        calls[0] += 1
        if calls[0] == 5:
            raise DiskFull("KBSYNC_HOME: 1 MiB free, 2 MiB needed for the next batch")
        return real_room(*args, **kwargs)

    monkeypatch.setattr(diskspace, "room", room_until_the_fifth_batch)

    with pytest.raises(DiskFull) as caught:
        run_plain([parse_root(str(share))], runtime=runtime)

    counts = counts_of(caught.value)
    assert counts is not None and _adds_up(counts), counts
    # Batches 1-4 written (slices 1-2), batch 5 (slice 3's first) stopped by the full disk,
    # batch 6 of slice 3 never begun; slices 4-5 never planned: not seen.
    assert (counts["files_seen"], counts["added"], counts["failed"],
            counts["not_attempted"]) == (30, 20, 5, 5), counts
    assert {f["error"] for f in counts["failures"]} == {"DiskFull"}


def test_the_tally_counts_the_batch_at_work_as_failed_and_the_rest_apart():
    summary = IngestSummary(run_id="r", namespace="default", collection="kbsync",
                            mode="incremental", dry_run=False, files_seen=7, added=2)
    items = [SimpleNamespace(doc_id=f"share/d{i}.md", file=None) for i in range(5)]

    Tally(summary).stopped(KeyboardInterrupt(), at_work=items[:2], not_begun=items[2:])

    assert (summary.failed, summary.not_attempted) == (2, 3)
    assert summary.added + summary.failed + summary.not_attempted == summary.files_seen
    assert [f["doc_id"] for f in summary.failures] == ["share/d0.md", "share/d1.md"]
    assert {f["error"] for f in summary.failures} == {ErrorCode.Interrupted}
    assert summary.warnings == ["3 planned file(s) not attempted: the run stopped before their "
                                "batch (Interrupted: KeyboardInterrupt)"]
    assert summary.to_dict()["not_attempted"] == 3
