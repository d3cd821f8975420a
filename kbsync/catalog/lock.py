"""The one lock policy: every writer of a collection holds a :class:`WriteLocks`' lock.

The rule, for ingest, ``add_text``, ``delete``, ``remove``, ``verify --repair``, rebuild,
rollback and restore alike:

1. **The front door decides, once.** Whether the distributed lock is taken is decided by
   the door a write comes in through, and only there: ``kbsync.app.locks.write_locks``
   for the CLI and the Python API (the distributed lock when a server store,
   ``KBSYNC_QDRANT_URL``, is written under a Prefect API, ``PREFECT_API_URL``), and
   :func:`tasks.locking.flow_locks` for the flows (always: a flow runs under a Prefect
   API). The decision is a :class:`WriteLocks` value; the executor (``InProcess``,
   ``PrefectExecutor``) and every writer below it (the runner, repair, removal, rollback,
   restore) receive it and call :meth:`WriteLocks.hold`, never :func:`ingest_lock` or an
   environment variable of their own. kbsync never imports Prefect: the Prefect limit
   (:func:`tasks.locking.prefect_limit`) is injected.
2. The lock file of :func:`ingest_lock_path` is always taken: per (logical collection,
   namespace) on a Qdrant server, one for the whole store on the embedded engine (it
   admits one process per folder).
3. On a Qdrant server, the distributed lock the door decided on is taken first.
4. On the embedded engine no distributed lock is taken, whatever the door decided: one
   machine, one lock file.

Both wait ``KBSYNC_LOCK_TIMEOUT_S`` (0: refuse at once) and refuse with
:class:`~kbsync.errors.LockHeld` naming the holder. Not reentrant.

Limits: the door reads ``PREFECT_API_URL`` from the environment only (a Prefect profile
naming an API is not seen). Without it a CLI or API write to a server store takes the lock
file alone: Prefect would otherwise keep the limit in a temporary local server (10-30 s to
start) that excludes writers of this machine only, as the lock file does. A shared Prefect
server is what makes the limit reach other machines. A library caller that passes no
:class:`WriteLocks` (``run_plain``, ``repair``) gets the lock file alone, and is refused
against a server store (:func:`given_or_embedded`): an unguarded server write is never
chosen silently.

Tested by ``tests/catalog/test_lock_doors.py`` (every door serialised, the decision
carried to every writer), ``tests/catalog/test_lock.py``,
``tests/catalog/test_sec_lock_holder.py``, ``tests/flows/test_run_lock.py`` (the Prefect
limit) and ``tests/arch/test_layers.py`` (only the doors decide).

The lock file is locked with ``flock`` through the ``filelock`` library; the OS releases it
when the holder dies, so a crashed (even SIGKILLed) run never leaves it stuck. The holder
writes who it is into the file (pid, namespace, what it is doing, since when) so that a
refused writer can name it; a stale record left by a dead holder is harmless because only
the ``flock`` decides who holds the lock.

A refusal names the *live* holder, never a finished run's record: the record is
believed only when its pid holds the flock now (``/proc/locks``); otherwise the
pid the kernel names is given (a process that wrote no record, e.g. another
user's ``flock``), and without ``/proc/locks`` a recorded pid that has exited is
never named. The lock folder and file are the home's (0700/0600,
:mod:`kbsync.home`), so another user cannot open, let alone lock, them.

``filelock`` takes, waits for and releases the lock. Kept here: the holder
record (written from filelock's ``on_acquired`` hook, while the lock is held),
the one warning when a writer starts to wait, the one-line :class:`LockHeld`
naming the holder, and :func:`probe`, which asks "is it held?" without taking
the lock or creating the file (filelock has no such query).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from filelock import FileLock, Timeout

from kbsync.errors import LockHeld, UsageError
from kbsync.home import current_access, make_dir, open_home
from kbsync.settings import Settings

log = logging.getLogger(__name__)


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


class DistributedLock(Protocol):
    """A lock that excludes writers on other machines, injected into :func:`ingest_lock`.

    Called only against a Qdrant server, before the lock file is taken; it raises
    :class:`~kbsync.errors.LockHeld` when another writer holds it past
    ``settings.lock_timeout_s``. The implementation is :func:`tasks.locking.prefect_limit`.
    """

    def __call__(self, settings: Settings, namespace: str, *,
                 purpose: str) -> AbstractContextManager[None]:
        """Hold the lock of ``settings``' logical collection and ``namespace``."""
        ...


@dataclass(frozen=True)
class WriteLocks:
    """A front door's lock decision, carried to every writer below it (module docstring).

    ``distributed`` is the door's decision: the lock of writers on other machines (the
    Prefect limit), or ``None`` (the lock file alone). Built by the doors only
    (``kbsync.app.locks.write_locks``, :func:`tasks.locking.flow_locks`); writers call
    :meth:`hold`.
    """

    settings: Settings
    distributed: DistributedLock | None = None

    def hold(self, namespace: str, purpose: str = "ingest") -> AbstractContextManager[None]:
        """Hold the write lock of ``namespace`` (:func:`ingest_lock` with the decision).

        Raises:
            LockHeld: another writer holds either lock past ``settings.lock_timeout_s``.
        """
        return ingest_lock(self.settings, namespace, purpose=purpose,
                           distributed=self.distributed)

    def for_purpose(self, purpose: str) -> Callable[[str], AbstractContextManager[None]]:
        """``namespace -> lock``: :meth:`hold` with ``purpose``, for an executor."""
        return lambda namespace: self.hold(namespace, purpose)


def given_or_embedded(locks: WriteLocks | None, settings: Settings) -> WriteLocks:
    """``locks``; or, when a library caller passed none, the lock file alone on the
    embedded engine (where the rule takes nothing more).

    Raises:
        UsageError: none was passed and the store is a Qdrant server: only a front door
            may decide whether its writers on other machines are excluded.
    """
    if locks is not None:
        return locks
    if settings.qdrant_url:
        raise UsageError("writing a Qdrant server needs the front door's lock decision: pass "
                         "locks=kbsync.app.locks.write_locks(settings)")
    return WriteLocks(settings)


@contextmanager
def ingest_lock(settings: Settings, namespace: str, *, purpose: str = "ingest",
                distributed: DistributedLock | None = None) -> Iterator[None]:
    """Hold the write lock of a collection and namespace: the one policy (module docstring).

    Writers call :meth:`WriteLocks.hold`, which carries their door's ``distributed``.

    Args:
        purpose: recorded in the lock file (``ingest``, ``remove``, ``rebuild``...), so a
            refused writer can name it.
        distributed: the lock of writers on other machines; taken first, and only
            against a Qdrant server.
    Raises:
        LockHeld: another writer holds either lock past ``settings.lock_timeout_s``.
        HomeExposed: others can open ``KBSYNC_HOME``.
    """
    open_home(settings.home, shared_group=settings.shared_group)  # HomeExposed: others can open it
    with ExitStack() as stack:
        if settings.qdrant_url and distributed is not None:
            stack.enter_context(distributed(settings, namespace, purpose=purpose))
        stack.enter_context(write_lock(ingest_lock_path(settings, namespace),
                                       timeout_s=settings.lock_timeout_s, namespace=namespace,
                                       purpose=purpose, scope=lock_scope(settings, namespace)))
        yield


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
    make_dir(path.parent)
    record = _record(namespace, purpose)
    # fallback_to_soft=False: a soft (existence) lock would outlive a killed holder, and the
    # release on death is the point of this lock. thread_local=False: the hold belongs to
    # this block, not to the thread that entered it. mode: 0600 (0660 shared), whatever the
    # umask: whoever can open the file can flock it.
    lock = FileLock(path, poll_interval=poll_s, thread_local=False, fallback_to_soft=False,
                    mode=current_access().file_mode,
                    on_acquired=lambda fd: _write_record(fd, record))
    _acquire(lock, path, timeout_s=timeout_s, poll_s=poll_s, scope=scope)
    try:
        yield
    finally:
        lock.release()


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


def refuse_if_held(settings: Settings, namespace: str) -> None:
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
