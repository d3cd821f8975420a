"""A write lock per (collection, namespace) so two ingests never interleave.

For the embedded engine the lock is a file beside the store (``flock``), which
the OS releases when the holder dies, so a crashed run never leaves it stuck.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from kbsync.errors import LockHeld

log = logging.getLogger(__name__)


def lock_path(home: Path, collection: str, namespace: str) -> Path:
    """Where the lock file of one collection and namespace lives."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{collection}.{namespace}")
    return home / "locks" / f"{safe}.lock"


def ingest_lock_path(settings, namespace: str) -> Path:
    """The lock an ingest takes.

    Against a Qdrant server two namespaces may be written at once, so the lock
    is per (collection, namespace). The embedded engine admits one process per
    store folder, so there one lock covers the whole store.
    """
    if settings.qdrant_url:
        return lock_path(settings.home, settings.collection, namespace)
    return lock_path(settings.home, "embedded-store", "all")


@contextmanager
def write_lock(path: Path, *, timeout_s: float = 0.0, poll_s: float = 0.5) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` for the duration of the block.

    Args:
        path: the lock file (created if missing).
        timeout_s: how long to wait for another holder; 0 refuses at once.
    Raises:
        LockHeld: another process holds it past the timeout (names its pid).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")
    try:
        deadline = time.monotonic() + timeout_s
        announced = False
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = _holder(path)
                if time.monotonic() >= deadline:
                    raise LockHeld(f"another ingest (pid {holder}) is writing this collection "
                                   f"and namespace; lock {path}") from None
                if not announced:
                    log.warning("waiting for the write lock held by pid %s (%s)", holder, path)
                    announced = True
                time.sleep(poll_s)
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        yield
    finally:
        handle.close()  # closing releases the flock


def _holder(path: Path) -> str:
    try:
        return path.read_text().strip() or "?"
    except OSError:
        return "?"
