"""A write lock per (collection, namespace) so two ingests never interleave.

For the embedded engine the lock is a file beside the store (``flock``), which
the OS releases when the holder dies, so a crashed run never leaves it stuck.
The holder writes who it is into the file (pid, namespace, what it is doing)
so that a refused writer can name it; a stale record left by a dead holder is
harmless because only the ``flock`` decides who holds the lock.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from kbsync.errors import LockHeld

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Holder:
    """Who holds (or last held) a lock file, as it recorded itself."""

    pid: str = "?"
    namespace: str | None = None
    purpose: str | None = None

    def describe(self) -> str:
        """``an ingest of namespace 'x' (pid 12)``, with what is known."""
        what = f"a {self.purpose}" if self.purpose else "another writer"
        if self.purpose and self.purpose[0] in "aeiou":
            what = f"an {self.purpose}"
        where = f" of namespace {self.namespace!r}" if self.namespace is not None else ""
        return f"{what}{where} (pid {self.pid})"


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


def lock_scope(settings, namespace: str) -> str:
    """What :func:`ingest_lock_path`'s lock guards, in words (for messages)."""
    if settings.qdrant_url:
        return f"collection {settings.collection!r}, namespace {namespace!r}"
    return f"the embedded store {settings.store_path} (one writer for all namespaces)"


def ingest_lock(settings, namespace: str, *, purpose: str = "ingest"):
    """The write lock of an ingest (or of anything writing like one, e.g. ``remove``).

    Waits ``settings.lock_timeout_s`` for another holder; see :func:`write_lock`.
    """
    return write_lock(ingest_lock_path(settings, namespace), timeout_s=settings.lock_timeout_s,
                      namespace=namespace, purpose=purpose, scope=lock_scope(settings, namespace))


@contextmanager
def write_lock(path: Path, *, timeout_s: float = 0.0, poll_s: float = 0.5,
               namespace: str | None = None, purpose: str | None = None,
               scope: str | None = None) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` for the duration of the block.

    Args:
        path: the lock file (created if missing).
        timeout_s: how long to wait for another holder; 0 refuses at once.
        namespace: recorded in the file for others' messages (the namespace written).
        purpose: recorded too (``ingest``, ``remove``, ...).
        scope: what the lock guards, in words, for the refusal message.
    Raises:
        LockHeld: another process holds it past the timeout (names its pid and namespace).
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
                holder = read_holder(path)
                if time.monotonic() >= deadline:
                    raise refusal(path, holder, scope, timeout_s) from None
                if not announced:
                    log.warning("waiting for the write lock held by %s (%s)",
                                holder.describe(), path)
                    announced = True
                time.sleep(poll_s)
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "namespace": namespace,
                                 "purpose": purpose}))
        handle.flush()
        yield
    finally:
        handle.close()  # closing releases the flock


def refusal(path: Path, holder: Holder, scope: str | None, waited_s: float) -> LockHeld:
    """The one-line :class:`LockHeld` naming the holder, what it guards and what to do."""
    what = scope or "this collection and namespace"
    wait = (f"waited {waited_s:g} s" if waited_s else
            "set KBSYNC_LOCK_TIMEOUT_S to wait for it")
    return LockHeld(f"{holder.describe()} is writing {what}; {wait} (lock {path})")


def probe(path: Path) -> Holder | None:
    """The current holder of ``path``, or ``None`` when it is free (or does not exist).

    A quick check only (the lock may change hands right after); it creates
    nothing, so a refusal can be given before any run starts.
    """
    try:
        handle = open(path)
    except FileNotFoundError:
        return None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return read_holder(path)
        return None


def read_holder(path: Path) -> Holder:
    """The holder recorded in ``path`` (a JSON object, or a bare pid in older files)."""
    try:
        text = path.read_text().strip()
    except OSError:
        return Holder()
    try:
        data = json.loads(text) if text else {}
    except ValueError:
        return Holder(pid=text or "?")
    if not isinstance(data, dict):
        return Holder(pid=str(data))
    return Holder(pid=str(data.get("pid") or "?"), namespace=data.get("namespace"),
                  purpose=data.get("purpose"))


def refuse_if_held(settings, namespace: str) -> None:
    """Raise the ingest lock's :class:`LockHeld` now when a writer holds it and
    ``KBSYNC_LOCK_TIMEOUT_S`` is 0 (the run would be refused anyway), creating nothing.

    A quick check before a run starts, not a substitute for taking the lock.
    """
    if settings.lock_timeout_s:
        return
    path = ingest_lock_path(settings, namespace)
    holder = probe(path)
    if holder is not None:
        raise refusal(path, holder, lock_scope(settings, namespace), 0)
