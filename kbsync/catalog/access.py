"""Permission profiles in the store, and the one filter every reader's search goes through.

Each chunk point carries ``access``: the id of its document's
:class:`~kbsync.perms.rule.Profile` (keyword-indexed in both adapters), and so does its
state record. The profiles themselves are meta records of the state collection, one per
id (content-addressed, so written once and never changed): the grant keys of the file's
``r`` and of every folder's ``x`` above it. They are written before any point that names
them (:func:`record_profiles`), so a point never names a profile the store lacks.

:func:`access_condition` is the one place a reader's view is built: every profile is
decided for the reader by the kernel's rule (:mod:`kbsync.perms.rule`, each distinct
grant once), and the condition is ``access`` in the allowed ids: fail-closed, since a
point with no ``access`` or an unknown one matches nothing. Search, ``ask`` (context and
citations), MQE and HyDE, evaluation and ``stats`` all ask it.

Who is asking: the process itself (its effective uid and groups), narrowed to
``as_user`` when given (never widened: a profile is allowed when both may read it).
Root is never filtered. A namespace with a root whose documents were written before
permissions were captured (no :data:`CAPTURED` record) serves the process as before,
unfiltered, and refuses ``as_user`` (:class:`~kbsync.errors.PermissionsNotCaptured`)
until the next ingest of that root records them.
"""

from __future__ import annotations

import logging
from typing import Iterable

from kbsync.catalog.identity import bound_roots
from kbsync.catalog.state import StateStore
from kbsync.errors import PermissionsNotCaptured
from kbsync.models import SourceFile
from kbsync.perms.reader import Reader
from kbsync.perms.rule import UNREADABLE, Profile
from kbsync.store.base import Match

log = logging.getLogger(__name__)

PROFILE = "access"
"""Meta kind of a profile record: ``{"access_id": id, "grants": [key, ...]}``."""
CAPTURED = "access-captured"
"""Meta kind marking a (namespace, root) whose documents all carry their profile."""
NOTHING = "-"
"""An ``access`` value no profile has: the condition of a reader who may read nothing."""


def record_profiles(states: StateStore, sources: Iterable[SourceFile]) -> None:
    """Write the record of each source's profile this state store has not written yet: call
    before writing any point that names one. Idempotent (a profile's record never changes)."""
    known = states.profiles_written
    for source in sources:
        if source.access is None or source.access in known:
            continue
        if source.access != UNREADABLE.id:
            states.write_meta(PROFILE, (source.access,), {
                "access_id": source.access, "grants": list(source.access_grants)})
        known.add(source.access)


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
    """Every profile the store holds."""
    return [Profile(id=r["access_id"], grants=tuple(r["grants"]))
            for r in states.read_meta(PROFILE, page_size=1024)]


def allowed_ids(profiles: Iterable[Profile], readers: Iterable[Reader]) -> list[str]:
    """The ids of the profiles every one of ``readers`` may read (root passes any)."""
    deciding: list[tuple[Reader, dict[str, bool]]] = [(r, {}) for r in readers if not r.is_root]
    return [p.id for p in profiles
            if all(p.readable_by(reader, decided) for reader, decided in deciding)]


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
    missing = uncaptured_roots(states, namespace)
    if missing:
        if as_user is None:
            return None  # the owner's view of a store from before permissions, as it was
        raise PermissionsNotCaptured(
            f"namespace {namespace!r}: root(s) {', '.join(missing)} have no permissions "
            f"recorded yet, so no other reader's view can be built; run `kbsync ingest` of "
            f"them once (nothing is converted or embedded again)")
    allowed = allowed_ids(load_profiles(states), readers)
    return Match("access", any_of=tuple(allowed) or (NOTHING,))
