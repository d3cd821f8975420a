"""The ingest status line (kbsync.app.console): its text, and nothing listens off a terminal."""

from __future__ import annotations

from kbsync.app import console
from kbsync.ingest import progress
from kbsync.ingest.progress import Progress


def test_the_line_counts_files_chunks_and_an_eta():
    line = console.progress_line(Progress(100, 400, 1234, complete=True), elapsed_s=20.0)
    assert line == "kbsync: ingesting 100/400 files, 1,234 chunks embedded, ETA 1:00"
    assert console.progress_line(Progress(0, 64, 0, complete=False), 3.0) == (
        "kbsync: ingesting 0/64+ files, 0 chunks embedded")
    assert console.progress_line(Progress(64, 64, 90, complete=True), 3.0).endswith(
        "90 chunks embedded, finishing")


def test_off_a_terminal_the_status_listens_to_nothing(monkeypatch):
    assert not console.err.is_terminal  # pytest captures stderr
    with console.ingest_status(enabled=True):
        assert progress._listeners == []
    with console.ingest_status(enabled=False):
        assert progress._listeners == []
