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

5. Once held, :meth:`WriteLocks.hold` reads the active pointer again
   (:func:`current_settings`): a writer whose collection a rebuild swapped out while it
   waited is refused, or (``follow``) writes the collection active now. One place, so no
   door forgets it; the pointer's own writers (rebuild, rollback, restore) are exempt.

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
carried to every writer), ``tests/catalog/test_sec_waiting_writer.py`` (the pointer read
again under the lock), ``tests/catalog/test_lock.py``,
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

import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from typing import Callable, Protocol

# The lock file itself (kbsync.catalog.lockfile), named here too: the policy's one import.
from kbsync.catalog.lockfile import (Holder, ingest_lock_path, live_holder,  # noqa: F401
                                     lock_path, lock_scope, probe, read_holder, refusal,
                                     require_writable,
                                     write_lock)
from kbsync.errors import UsageError
from kbsync.home import open_home
from kbsync.settings import Settings

log = logging.getLogger(__name__)


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

    @contextmanager
    def hold(self, namespace: str, purpose: str = "ingest", *,
             follow: bool = False) -> Iterator[Settings]:
        """Hold the write lock of ``namespace`` (:func:`ingest_lock` with the decision), then
        resolve the active collection again: the one place every waiting writer does.

        ``settings`` were resolved before the wait; a ``kbsync rebuild`` (or a rollback)
        holding the lock meanwhile may have swapped the collection they name out. Once the
        lock is held the pointer is read again (:func:`current_settings`): unchanged, the
        block runs with ``settings``; changed, it is refused, or with ``follow`` (a writer
        that opens its store inside the block, such as ``kbsync remove``) it runs with the
        settings of the collection active now. The pointer's own writers (purposes in
        :data:`POINTER_WRITERS`) read it under the lock themselves and are not checked.

        Yields:
            The settings to write with (``settings``, or the re-resolved ones).
        Raises:
            LockHeld: another writer holds either lock past ``settings.lock_timeout_s``.
            StoreUnavailable: the active collection changed while this writer waited
                (without ``follow``); running it again writes the new one.
        """
        with ingest_lock(self.settings, namespace, purpose=purpose,
                         distributed=self.distributed):
            if purpose in POINTER_WRITERS:
                yield self.settings
                return
            yield current_settings(self.settings, follow=follow)

    def for_purpose(self, purpose: str) -> Callable[[str], AbstractContextManager[Settings]]:
        """``namespace -> lock``: :meth:`hold` with ``purpose``, for an executor."""
        return lambda namespace: self.hold(namespace, purpose)


POINTER_WRITERS = frozenset({"rebuild", "rollback", "restore"})
"""Purposes whose writers change the active pointer (and read it under the lock)."""


def current_settings(settings: Settings, *, follow: bool = False) -> Settings:
    """``settings`` when they still name the active collection; else (a swap meanwhile) the
    settings of the active one with ``follow``, or a refusal. Call under the write lock.

    Raises:
        StoreUnavailable: the active collection changed and ``follow`` is off.
        StoreError: the pointer was lost meanwhile (:func:`kbsync.catalog.active.resolve`).
    """
    from kbsync.catalog import active

    if not follow:
        active.check_still_active(settings)
        return settings
    configured = settings.model_copy(update={"collection": settings.logical_collection,
                                             "active_of": None})
    record = active.read_record(configured)  # never this command's earlier answer
    if record is None:
        active.refuse_if_orphaned(configured)
    now = configured if record is None else active.aimed_at(configured, record)
    if now.collection != settings.collection:
        log.warning("collection %s now serves from %s, not %s (a rebuild swapped them while "
                    "this writer waited for the lock): writing %s", settings.logical_collection,
                    now.collection, settings.collection, now.collection)
        return now
    return settings


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


def refuse_if_held(settings: Settings, namespace: str) -> None:
    """Raise the ingest lock's :class:`LockHeld` now when a writer holds it and
    ``KBSYNC_LOCK_TIMEOUT_S`` is 0, or ``StoreReadOnly`` when the lock could not be
    created (a read-only home): the run would be refused anyway. Creates nothing.

    A quick check before a run starts, not a substitute for taking the lock.
    """
    path = ingest_lock_path(settings, namespace)
    require_writable(path)
    if settings.lock_timeout_s:
        return
    holder = probe(path)
    if holder is not None:
        raise refusal(path, holder, lock_scope(settings, namespace), 0)
