"""SIGTERM and SIGHUP end the CLI as Ctrl-C does: one error line, the JSON object with
``--json``, and whatever the command started stopped with it.

systemd, a CI timeout and a scheduler stop a process with SIGTERM; a closed terminal
sends SIGHUP. By default either kills Python at once: no line, an empty stdout under
``--json``, no ``atexit`` hook (so ``kbsync ingest``'s temporary Prefect server lived
on, ~220 MB each). :func:`handled` turns both into :class:`Terminated`, a
``KeyboardInterrupt``, so they take the path Ctrl-C takes through Prefect's engine (the
run ends Crashed, its counts ride on the exception) and out of ``main``.

Prefect's flow engine installs its own SIGTERM handler for the run; when it has unwound
the run it puts the previous handler back and sends the signal again, so this one is
then raised where the flow was called.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

HANDLED = tuple(s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None))
                if s is not None)


class Terminated(KeyboardInterrupt):
    """The process was asked to stop by ``signum`` (exit status ``128 + signum``)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"terminated by {signal.Signals(signum).name}")


@contextmanager
def handled() -> Iterator[None]:
    """SIGTERM and SIGHUP raise :class:`Terminated` inside the block (main thread only:
    elsewhere Python allows no handler); the previous handlers are back after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _raise_terminated) for signum in HANDLED}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _raise_terminated(signum: int, frame) -> None:
    # Once: a second signal while the first unwinds kills at once (its default action), as
    # someone who sends it again means; what was started still ends (it dies with us).
    signal.signal(signum, signal.SIG_DFL)
    raise Terminated(signum)
