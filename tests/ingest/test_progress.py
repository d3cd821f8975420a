"""An ingest tells the progress listeners each plan and each batch (kbsync.ingest.progress)."""

from __future__ import annotations

from kbsync.ingest.discover import parse_root
from kbsync.ingest.progress import Meter, Progress, listening
from kbsync.ingest.runner import run_plain
from kbsync.runtime import Runtime
from kbtest import topic_share


def test_a_run_reports_files_and_chunks_batch_by_batch(settings, tmp_path, monkeypatch):
    monkeypatch.setenv("KBSYNC_FILES_PER_BATCH", "4")
    from kbsync.settings import Settings

    share = topic_share(tmp_path / "share", 10)
    other = topic_share(tmp_path / "other", 4)
    seen: list[Progress] = []
    runtime = Runtime.open(Settings())
    try:
        with listening(seen.append):
            summary = run_plain([parse_root(f"share={share}"), parse_root(f"two={other}")],
                                runtime=runtime)
    finally:
        runtime.close()
    assert summary.added == 14 and summary.failed == 0
    assert [(p.files_done, p.files_planned, p.complete) for p in seen] == [
        (0, 10, False), (4, 10, False), (8, 10, False), (10, 10, False),
        (10, 14, True), (14, 14, True)]
    assert seen[-1].chunks_embedded == summary.embeddings_computed + summary.embeddings_cached > 0
    assert [p.chunks_embedded for p in seen] == sorted(p.chunks_embedded for p in seen)


def test_a_failing_listener_does_not_stop_the_run_and_leaves_when_done():
    def broken(progress: Progress) -> None:
        raise RuntimeError("display gone")

    seen: list[Progress] = []
    meter = Meter(1)
    with listening(broken), listening(seen.append):
        meter.planned(3, last_slice=True)
        meter.batch_done(3, 7)
    meter.batch_done(1, 1)  # nobody listens any more
    assert seen == [Progress(0, 3, 0, True), Progress(3, 3, 7, True)]
