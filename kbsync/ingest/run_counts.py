"""The counts a failed run reached, carried by its exception to whoever reports it.

A run that fails (store unavailable, total embedding outage, lock held, ...)
still owes its caller the counts it reached: ``kbsync ingest --json`` prints
them beside ``error``. The flow and its per-root subflows wrap their work in
:func:`keep_counts`, which attaches the summary reached so far to the
exception as it passes; an enclosing run merges a nested run's counts into its
own. The exception object travels unchanged through Prefect's in-process flow
calls (and pickles with its attributes), and a caller that finds nothing
attached reports zeros, so this is a best effort that never hides the error.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

_ATTR = "kbsync_counts"


@contextmanager
def keep_counts(summary, *, started: float | None = None) -> Iterator[None]:
    """Attach ``summary.to_dict()`` to any exception leaving the block, then re-raise it.

    Args:
        summary: an :class:`~kbsync.ingest.summary.IngestSummary` (anything with
            ``to_dict()`` and ``merge(dict)``).
        started: ``time.perf_counter()`` at the run's start, to fill ``duration_s``.

    Counts a nested run attached to the same exception are merged into
    ``summary`` first, so each level adds its own work exactly once.
    """
    try:
        yield
    except BaseException as exc:
        attach(exc, summary, started=started)
        raise


def attach(exc: BaseException, summary, *, started: float | None = None) -> None:
    """Attach the counts of ``summary`` (plus any nested run's already on ``exc``) to ``exc``."""
    inner = counts_of(exc)
    if inner is not None:
        summary.merge(inner)
    if started is not None:
        summary.duration_s = round(time.perf_counter() - started, 3)
    try:
        setattr(exc, _ATTR, summary.to_dict())
    except AttributeError:  # an exception type with __slots__: the caller reports zeros
        pass


def counts_of(exc: BaseException | None) -> dict | None:
    """The counts attached by :func:`keep_counts`, or ``None``.

    An exception raised while another one carrying counts was handled (SIGTERM's, raised
    again after Prefect's own ``TerminationSignal`` unwound the run) reports those.
    """
    seen = 0
    while exc is not None and seen < 8:
        counts = getattr(exc, _ATTR, None)
        if isinstance(counts, dict):
            return counts
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None
