"""Permission profiles in the store, and the one filter every reader's search goes through.

Each chunk point carries ``access``: the id of its document's
:class:`~kbsync.perms.rule.Profile` (keyword-indexed in both adapters), and so does its
state record. The profiles themselves are meta records of the state collection, one per
id: the grant keys of the file's ``r`` and of every folder's ``x`` above it. An id names a
file grant in one folder (:meth:`Profile.of <kbsync.perms.rule.Profile.of>`), so a change of
a folder's permissions replaces the grants of the records of the profiles below it, and
writes no point (:func:`record_grants`). Records are written before any point that names
them (:func:`record_profiles`), so a point never names a profile the store lacks.

:func:`access_condition` is the one place a reader's view is built: every profile is
decided for the reader by the kernel's rule (:mod:`kbsync.perms.rule`, each distinct
grant once), and the condition is ``access`` in the allowed ids: fail-closed, since a
point with no ``access`` or an unknown one matches nothing. Search, ``ask`` (context and
citations), MQE and HyDE, evaluation and ``stats`` all ask it.

Deciding every profile for a reader costs ~0.2 s at a few thousand profiles (reading them
is most of it), far more than the search it narrows, so :func:`readable_ids` remembers the
profiles of each state collection, and each reader's allowed ids, for as long as the number
of profile records stays the same: one indexed count says whether it did, read again after
every write to the store (:mod:`kbsync.store.memo`; on a store without a revision, a Qdrant
server or a relay reader, once per search). Which roots of a namespace are not captured yet
is kept the same way. A
record is added for each new profile, and a :data:`REVISION` record each time records were
replaced, so every change of a profile changes the count and is read at the next search.
The reader is part of the key with its groups as NSS gives them now, so a change of
membership still applies to the next search.

Who is asking: the process itself (its effective uid and groups), narrowed to
``as_user`` when given (never widened: a profile is allowed when both may read it).
Root is never filtered. A namespace with a root whose documents were written before
permissions were captured (no :data:`CAPTURED` record) serves the process as before,
unfiltered, and refuses ``as_user`` (:class:`~kbsync.errors.PermissionsNotCaptured`)
until the next ingest of that root records them.
"""

from __future__ import annotations

import logging
import threading
import uuid
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from kbsync.catalog.identity import bound_roots
from kbsync.catalog.state import StateStore
from kbsync.errors import PermissionsNotCaptured
from kbsync.models import SourceFile
from kbsync.perms.reader import Reader
from kbsync.perms.rule import UNREADABLE, Profile
from kbsync.store.base import Match
from kbsync.store.memo import remember

log = logging.getLogger(__name__)

PROFILE = "access"
"""Meta kind of a profile record: ``{"access_id": id, "grants": [key, ...]}``."""
CAPTURED = "access-captured"
"""Meta kind marking a (namespace, root) whose documents all carry their profile."""
REVISION = "revision"
"""A record of kind :data:`PROFILE` without a profile: added whenever a profile record was
replaced, so that the number of :data:`PROFILE` records changes with every change of a
profile (the cache key of :func:`readable_ids`)."""
NOTHING = "-"
"""An ``access`` value no profile has: the condition of a reader who may read nothing."""


def record_profiles(states: StateStore, sources: Iterable[SourceFile]) -> int:
    """Write the record of each source's profile: call before writing any point that names
    one. Returns how many records were written. See :func:`record_grants`."""
    return record_grants(states, ((s.access, s.access_grants) for s in sources
                                  if s.access is not None))


def record_grants(states: StateStore, profiles: Iterable[tuple[str, Sequence[str]]]) -> int:
    """Record each ``(profile id, grants)`` whose record is missing or says other grants
    than these (a folder's permissions changed: its profiles keep their ids, so their
    documents' points are not written, and this record is the whole update). Returns how
    many records were written; when one replaced a record, a :data:`REVISION` record is
    added too, so :func:`readable_ids` reads the profiles again. Idempotent."""
    stored = _stored(states)
    written = replaced = 0
    for access, grants in profiles:
        grants = tuple(grants)
        if access == UNREADABLE.id or stored.get(access) == grants:
            continue
        replaced += access in stored
        states.write_meta(PROFILE, (access,), {"access_id": access, "grants": list(grants)})
        states.profile_records += access not in stored
        stored[access] = grants
        written += 1
    if replaced:
        states.write_meta(PROFILE, (REVISION, uuid.uuid4().hex), {REVISION: replaced})
        states.profile_records += 1
    return written


def changed_profiles(states: StateStore, profiles: Iterable[Profile]) -> list[Profile]:
    """Those of ``profiles`` (a walk's) whose record says other grants: a folder above their
    documents changed its permissions. New profiles are not among them (their documents'
    writes record them)."""
    stored = _stored(states)
    return [p for p in profiles if p.id in stored and stored[p.id] != p.grants]


def _stored(states: StateStore) -> dict[str, tuple[str, ...]]:
    """The store's profile grants, read again whenever the number of profile records is not
    what this process last read or wrote (another process, a later run, wrote some)."""
    count = states.count_meta(PROFILE)
    if states.profile_grants is None or count != states.profile_records:
        states.profile_grants = {p.id: p.grants for p in load_profiles(states)}
        states.profile_records = count
    return states.profile_grants


def mark_captured(states: StateStore, namespace: str, root: str) -> None:
    """Record that every document of ``root`` in ``namespace`` carries its profile (after a
    root's run that reached each of them; documents that failed keep their points, and
    until they are written again a reader who is not root or the owner never sees them)."""
    states.write_meta(CAPTURED, (namespace, root),
                      {"captured_namespace": namespace, "captured_root": root})


def uncaptured_roots(states: StateStore, namespace: str) -> list[str]:
    """The bound roots of ``namespace`` whose documents may lack their profile."""
    done = {r["captured_root"] for r in states.read_meta(CAPTURED, captured_namespace=namespace)}
    return sorted(bound_roots(states, namespace) - done)


def load_profiles(states: StateStore) -> list[Profile]:
    """Every profile the store holds (not the :data:`REVISION` records)."""
    return [Profile(id=r["access_id"], grants=tuple(r["grants"]))
            for r in states.read_meta(PROFILE, page_size=1024) if "access_id" in r]


def allowed_ids(profiles: Iterable[Profile], readers: Iterable[Reader]) -> list[str]:
    """The ids of the profiles every one of ``readers`` may read (root passes any)."""
    deciding: list[tuple[Reader, dict[str, bool]]] = [(r, {}) for r in readers if not r.is_root]
    return [p.id for p in profiles
            if all(p.readable_by(reader, decided) for reader, decided in deciding)]


CACHED_READERS = 256
"""Readers whose allowed ids are remembered per state collection (the least recent go)."""


@dataclass
class _Known:
    """The profiles of one state collection as read when it held ``count`` of them, and the
    allowed ids of the readers asked since."""

    count: int
    profiles: list[Profile]
    allowed: OrderedDict[tuple[Reader, ...], tuple[str, ...]] = field(default_factory=OrderedDict)


_known: "weakref.WeakKeyDictionary[object, dict[str, _Known]]" = weakref.WeakKeyDictionary()
_known_lock = threading.Lock()


def readable_ids(states: StateStore, readers: Sequence[Reader]) -> tuple[str, ...]:
    """:func:`allowed_ids` of :func:`load_profiles`, remembered per store and state
    collection while its number of profile records is unchanged (module doc)."""
    # Before reading: a record added meanwhile reads again. Kept until the store is written
    # (kbsync.store.memo; a store without a revision counts every time).
    count = remember(states.store, ("profiles", states.collection),
                     lambda: states.count_meta(PROFILE))
    key = tuple(readers)
    try:
        with _known_lock:
            per_store = _known.setdefault(states.store, {})
            known = per_store.get(states.collection)
            if known is not None and known.count == count and key in known.allowed:
                known.allowed.move_to_end(key)
                return known.allowed[key]
    except TypeError:  # a store that cannot be weakly referenced: nothing remembered
        return tuple(allowed_ids(load_profiles(states), readers))
    if known is None or known.count != count:
        known = _Known(count=count, profiles=load_profiles(states))
    allowed = tuple(allowed_ids(known.profiles, readers))
    with _known_lock:
        known.allowed[key] = allowed
        while len(known.allowed) > CACHED_READERS:
            known.allowed.popitem(last=False)
        per_store[states.collection] = known
    return allowed


def access_condition(states: StateStore, namespace: str,
                     as_user: str | None = None) -> Match | None:
    """The condition that narrows ``namespace`` to what the reader may read, or ``None``
    when nothing is filtered (root; the process itself on a namespace not yet captured).

    Raises:
        PermissionsNotCaptured: ``as_user`` on a namespace with roots not yet captured.
        UsageError: ``as_user`` names no user.
    """
    readers = [Reader.of_process()]
    if as_user is not None:
        readers.append(Reader.of_name(as_user))
    if all(r.is_root for r in readers):
        return None
    missing = remember(states.store, ("uncaptured", states.collection, namespace),
                       lambda: tuple(uncaptured_roots(states, namespace)))
    if missing:
        if as_user is None:
            return None  # the owner's view of a store from before permissions, as it was
        raise PermissionsNotCaptured(
            f"namespace {namespace!r}: root(s) {', '.join(missing)} have no permissions "
            f"recorded yet, so no other reader's view can be built; run `kbsync ingest` of "
            f"them once (nothing is converted or embedded again)")
    return Match("access", any_of=readable_ids(states, readers) or (NOTHING,))
