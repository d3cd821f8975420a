"""An ingest's progress as it runs: files done of files planned, chunks embedded (issue 41).

The runner (:mod:`kbsync.ingest.runner`) tells one :class:`Meter` per run what each root's
plan holds and what each batch did; the meter hands a :class:`Progress` to every callback
registered with :func:`listening` in this process. ``kbsync ingest`` registers one to draw
the line on a terminal (:func:`kbsync.app.console.ingest_status`); the flow runs in the
command's process (its tasks in threads, or only their preparation on Dask workers: the
runner gathers every batch here), so the callback sees every batch.

Limits: the totals grow as roots and slices are planned (``complete`` is False until the
last root's last slice is planned); heal-only work is not counted; a dry run reports
nothing. A callback that raises is logged at DEBUG and ignored: a display never stops a
run. Tested by tests/ingest/test_progress.py and, through a terminal, by
tests/app/test_ingest_progress_tty.py.
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Progress:
    """One moment of a run: what was planned so far and what is done."""

    files_done: int
    files_planned: int
    chunks_embedded: int
    complete: bool
    """Every root's every slice is planned: ``files_planned`` will not grow."""


Listener = Callable[[Progress], None]

_listeners: list[Listener] = []
_lock = threading.Lock()


@contextmanager
def listening(callback: Listener) -> Iterator[None]:
    """Call ``callback`` with each :class:`Progress` of the runs in this process while the
    block runs (from the runner's thread)."""
    with _lock:
        _listeners.append(callback)
    try:
        yield
    finally:
        with _lock:
            _listeners.remove(callback)


class Meter:
    """One run's progress, told to the listeners at each plan and each batch.

    Args:
        roots: how many roots the run has (the totals are complete once each is planned).
    """

    def __init__(self, roots: int) -> None:
        self._roots_left = roots
        self._done = self._planned = self._chunks = 0
        self._lock = threading.Lock()

    def planned(self, files: int, *, last_slice: bool) -> None:
        """A slice of a root was planned: ``files`` to process (``last_slice``: the root's
        plan is whole)."""
        with self._lock:
            self._planned += files
            self._roots_left -= 1 if last_slice else 0
            now = self._now()
        _tell(now)

    def batch_done(self, files: int, chunks: int) -> None:
        """A batch of ``files`` finished, ``chunks`` chunks embedded (computed or cached)."""
        with self._lock:
            self._done += files
            self._chunks += chunks
            now = self._now()
        _tell(now)

    def _now(self) -> Progress:
        return Progress(files_done=self._done, files_planned=self._planned,
                        chunks_embedded=self._chunks, complete=self._roots_left <= 0)


def _tell(progress: Progress) -> None:
    with _lock:
        listeners = list(_listeners)
    for callback in listeners:
        try:
            callback(progress)
        except Exception:  # noqa: BLE001 - a display never stops a run
            log.debug("a progress listener failed", exc_info=True)
