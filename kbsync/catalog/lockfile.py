"""The lock file of :mod:`kbsync.catalog.lock`'s policy: taking it, waiting for it, and
naming its holder (split from the policy so :mod:`kbsync.catalog.active` can take the lock
file without importing the policy, which resolves the active collection).

See :mod:`kbsync.catalog.lock` for the rule, the holder record and the refusal; tested by
``tests/catalog/test_lock.py`` and ``tests/catalog/test_sec_lock_holder.py``.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from kbsync.errors import KbsyncError, LockHeld, StoreError, StoreReadOnly
from kbsync.home import current_access, make_dir
from kbsync.settings import Settings

log = logging.getLogger("kbsync.catalog.lock")  # one logger for the whole lock policy


@dataclass(frozen=True)
class Holder:
    """Who holds (or last held) a lock file, as it recorded itself."""

    pid: str = "?"
    namespace: str | None = None
    purpose: str | None = None
    since: str | None = None
    """When the holder took the lock (UTC, ISO 8601); absent in records of older versions."""
    recorded: bool = True
    """False: the live holder wrote no record of its own (pid from the kernel, if known)."""
    command: str | None = None
    """The unrecorded holder's command name (``/proc/<pid>/comm``), when readable."""

    def describe(self) -> str:
        """``an ingest of namespace 'x' (pid 12)``, with what is known."""
        if not self.recorded:
            if self.pid == "?":
                return ("another process (not named: the lock file's record is of a "
                        "finished run)")
            command = f"{self.command!r}, " if self.command else ""
            return f"another process ({command}pid {self.pid}) that wrote no holder record"
        what = f"a {self.purpose}" if self.purpose else "another writer"
        if self.purpose and self.purpose[0] in "aeiou":
            what = f"an {self.purpose}"
        where = f" of namespace {self.namespace!r}" if self.namespace is not None else ""
        return f"{what}{where} (pid {self.pid})"

    def held_since(self) -> str:
        """`` since 2026-12-01T12:00:00Z``, or nothing when the record has no time."""
        return f" since {self.since}" if self.since else ""


def lock_path(home: Path, collection: str, namespace: str) -> Path:
    """Where the lock file of one collection and namespace lives."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{collection}.{namespace}")
    return home / "locks" / f"{safe}.lock"


def ingest_lock_path(settings: Settings, namespace: str) -> Path:
    """The lock an ingest takes.

    Against a Qdrant server two namespaces may be written at once, so the lock
    is per (collection, namespace). The embedded engine admits one process per
    store folder, so there one lock covers the whole store.
    """
    if settings.qdrant_url:
        # The logical name: a run that waited while `kbsync rebuild` swapped collections
        # waited on the same lock as the swap (kbsync.catalog.active).
        return lock_path(settings.home, settings.logical_collection, namespace)
    return lock_path(settings.home, "embedded-store", "all")


def lock_scope(settings: Settings, namespace: str) -> str:
    """What :func:`ingest_lock_path`'s lock guards, in words (for messages)."""
    if settings.qdrant_url:
        return f"collection {settings.logical_collection!r}, namespace {namespace!r}"
    return f"the embedded store {settings.store_path} (one writer for all namespaces)"


@contextmanager
def write_lock(path: Path, *, timeout_s: float = 0.0, poll_s: float = 0.5,
               namespace: str | None = None, purpose: str | None = None,
               scope: str | None = None) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` for the duration of the block.

    Not reentrant: a second ``write_lock`` on the same path, even in the same
    thread, is another writer and is refused (or waits) like one.

    Args:
        path: the lock file (created if missing; never deleted, so waiters share one inode).
        timeout_s: how long to wait for another holder; 0 refuses at once.
        poll_s: how often a waiting writer tries again.
        namespace: recorded in the file for others' messages (the namespace written).
        purpose: recorded too (``ingest``, ``remove``, ...).
        scope: what the lock guards, in words, for the refusal message.
    Raises:
        LockHeld: another process holds it past the timeout (names its pid and namespace).
    """
    try:
        make_dir(path.parent)
    except OSError as exc:
        raise unwritable(path, exc) from exc
    record = _record(namespace, purpose)
    # fallback_to_soft=False: a soft (existence) lock would outlive a killed holder, and the
    # release on death is the point of this lock. thread_local=False: the hold belongs to
    # this block, not to the thread that entered it. mode: 0600 (0660 shared), whatever the
    # umask: whoever can open the file can flock it.
    lock = FileLock(path, poll_interval=poll_s, thread_local=False, fallback_to_soft=False,
                    mode=current_access().file_mode,
                    on_acquired=lambda fd: _write_record(fd, record))
    try:
        _acquire(lock, path, timeout_s=timeout_s, poll_s=poll_s, scope=scope)
    except OSError as exc:
        raise unwritable(path, exc) from exc
    try:
        yield
    finally:
        lock.release()


def require_writable(path: Path) -> None:
    """Raise :func:`unwritable`'s error now when the lock file ``path`` could not be
    created or opened for writing (checked with ``access``: nothing is created).

    Raises:
        StoreReadOnly: a read-only mount, or no write permission for this user.
    """
    target = path
    while not target.exists() and target.parent != target:
        target = target.parent
    if not os.access(target, os.W_OK):
        code = errno.EROFS if _read_only_mount(target) else errno.EACCES
        raise unwritable(path, OSError(code, os.strerror(code)))


def _read_only_mount(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def unwritable(path: Path, exc: OSError) -> KbsyncError:
    """The one line of a write lock that cannot be created: a read-only home is
    ``StoreReadOnly`` (the writer needs a writable ``KBSYNC_HOME``); another cause is a
    ``StoreError`` naming it."""
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return StoreReadOnly(
            f"the write lock {path} cannot be created ({exc.strerror}): KBSYNC_HOME is on a "
            "read-only mount or not writable by this user; searches still read it, but an "
            "ingest, a removal or a repair needs a writable KBSYNC_HOME (copy it with cp -a "
            "and point KBSYNC_HOME there) or a Qdrant server (KBSYNC_QDRANT_URL)")
    return StoreError(f"the write lock {path} cannot be created: {exc}")


def _acquire(lock: FileLock, path: Path, *, timeout_s: float, poll_s: float,
             scope: str | None) -> None:
    """Take ``lock`` at once, or warn once and wait up to ``timeout_s``; else raise LockHeld."""
    deadline = time.monotonic() + timeout_s
    try:
        lock.acquire(blocking=False)
        return
    except Timeout:
        holder = live_holder(path)
    if timeout_s <= 0:
        raise refusal(path, holder, scope, timeout_s)
    log.warning("waiting for the write lock held by %s%s (%s)", holder.describe(),
                holder.held_since(), path)
    try:
        lock.acquire(timeout=max(deadline - time.monotonic(), 0.0), poll_interval=poll_s)
    except Timeout:
        raise refusal(path, live_holder(path), scope, timeout_s) from None


def _record(namespace: str | None, purpose: str | None) -> bytes:
    """The holder record this process writes into the lock file once it holds it."""
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return json.dumps({"pid": os.getpid(), "namespace": namespace, "purpose": purpose,
                       "since": since}).encode()


def _write_record(fd: int, record: bytes) -> None:
    """filelock's ``on_acquired`` hook: replace the last holder's record with ours.

    Runs while the flock is held and leaves the descriptor open and locked, as
    filelock requires; a failure here rolls the acquisition back.
    """
    os.ftruncate(fd, 0)
    os.pwrite(fd, record, 0)


def refusal(path: Path, holder: Holder, scope: str | None, waited_s: float) -> LockHeld:
    """The one-line :class:`LockHeld` naming the holder, what it guards and what to do."""
    what = scope or "this collection and namespace"
    wait = (f"waited {waited_s:g} s" if waited_s else
            "set KBSYNC_LOCK_TIMEOUT_S to wait for it")
    return LockHeld(f"{holder.describe()} is writing {what}{holder.held_since()}; {wait} "
                    f"(lock {path})")


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
            return live_holder(path)
        return None


def live_holder(path: Path) -> Holder:
    """Who holds ``path``'s flock now, never a finished run (see the module docstring).

    The record when its pid is among the kernel's holders of the file; else the
    kernel's holder, unrecorded; without ``/proc/locks``, the record only while
    its pid is alive.
    """
    recorded = read_holder(path)
    pids = _flock_pids(path)
    if pids is None:
        return recorded if _alive(recorded.pid) else Holder(recorded=False)
    if recorded.pid in pids:
        return recorded
    if pids:
        return Holder(pid=pids[0], recorded=False, command=_command(pids[0]))
    return Holder(recorded=False)


def _flock_pids(path: Path) -> list[str] | None:
    """Pids holding a ``flock`` on ``path`` per ``/proc/locks`` (None: unreadable)."""
    try:
        st = os.stat(path)
        with open("/proc/locks") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    exact = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    same, same_inode = [], []
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 4242 fe:00:2146327 0 EOF"; "->" lines are waiters
        if len(fields) < 6 or fields[1] != "FLOCK" or not fields[4].isdigit() \
                or int(fields[4]) <= 0:
            continue
        if fields[5] == exact:
            same.append(fields[4])
        elif fields[5].rsplit(":", 1)[-1] == str(st.st_ino):
            same_inode.append(fields[4])  # overlay file systems may show another device
    return same or same_inode


def _alive(pid: str) -> bool:
    """Whether a process with this pid exists (another user's counts)."""
    if not pid.isdigit() or int(pid) <= 0:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _command(pid: str) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() or None
    except OSError:
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
                  purpose=data.get("purpose"), since=data.get("since"))
