"""Resolving the configured (logical) collection to the active physical one.

Every command works on ``Settings.collection``. After ``kbsync rebuild`` swapped in
a shadow collection, the logical name ``KBSYNC_COLLECTION`` points to another
physical collection (:mod:`kbsync.store.active`); :func:`resolve` returns the
settings with ``collection`` set to it (``active_of`` keeps the logical name, on
which write locks are taken) and with that collection's *build* settings in force:
its embedding provider, model and dimensions, chunk budget and overlap, and
contextual text. So search, ask, eval and ingest keep serving the active
collection with the model it was built with, whatever the environment says; a
``KBSYNC_*`` value that differs from the active collection's is named in one
warning (``kbsync rebuild`` is how a model or chunking change takes effect).

Settings without a pointer come back unchanged, so stores never rebuilt behave as
before. A lost embedded pointer (deleted, or ``qdrant/`` restored from a backup without
``active/``) is recovered from its second copy in the store folder when that copy names
a collection that exists (:func:`recover`: one warning, written back). Otherwise, when
rebuilt generations ``<name>__r<N>`` exist and the logical collection is gone or was
once replaced by a swap, every command is refused (:func:`refuse_if_orphaned`): it would
otherwise serve the replaced collection (or "nothing is indexed yet") and the next
ingest would write into it. ``kbsync rebuild --restore NAME`` points it back.
:func:`resolve` is idempotent.

Resolved once per command: the CLI resolves, then runs the flow in process inside
:func:`resolved`, so the flow's own :func:`resolve` takes that answer instead of reading the
pointer again. A writer still asks again under its write lock (:func:`check_still_active`):
a rebuild that swapped meanwhile is refused, never written into. A long-lived reader
(``kbsync serve``, the MCP server, a :class:`kbsync.api.KnowledgeBase`) asks before each
request; the API asks :func:`pointer_mark` first, which is cheaper, and resolves again only
when it changed.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator, Protocol, cast, runtime_checkable

from kbsync.errors import StoreError, StoreUnavailable
from kbsync.catalog.state import StateStore, utc_now
from kbsync.settings import EmbedProvider, Settings
from kbsync.store import active as pointer
from kbsync.store.base import VectorStore

log = logging.getLogger(__name__)

BUILD = "build"  # meta record kind: the settings a collection was built with
BUILD_FIELDS = ("embed_provider", "embed_model", "embed_dimensions", "chunk_tokens",
                "chunk_overlap", "chunk_fit", "contextual_text")
_warned: set[tuple] = set()
# (configured, resolved): the answer this command already has (:func:`resolved`)
_answer: ContextVar[tuple[Settings, Settings] | None] = ContextVar("kbsync_resolved",
                                                                   default=None)


def build_of(settings: Settings) -> dict[str, Any]:
    """The build settings of ``settings`` (JSON values; the model name filled in)."""
    values = settings.model_dump(mode="json", include=set(BUILD_FIELDS))
    values["embed_model"] = settings.embed_model_name()
    return values


def apply_build(settings: Settings, build: dict[str, Any]) -> Settings:
    """``settings`` with the ``build`` values in force (unknown keys ignored)."""
    update = {k: v for k, v in build.items() if k in BUILD_FIELDS}
    if "embed_provider" in update:
        update["embed_provider"] = EmbedProvider(update["embed_provider"])
    return settings.model_copy(update=update)


def read_record(settings: Settings,
                store: VectorStore | None = None) -> pointer.ActiveRecord | None:
    """The pointer of ``settings.logical_collection``, or ``None``.

    On a Qdrant server the aliases are read (``store``: an open
    :class:`~kbsync.store.server.store.ServerStore`, else a short-lived client) and the
    build settings come from the active collection's state record; on the
    embedded engine from the pointer file.
    """
    logical = settings.logical_collection
    server = hasattr(store, "client") if store is not None else bool(settings.qdrant_url)
    if not server:
        return pointer.read_pointer(settings.home, logical) or recover(settings)
    own = store is None
    if store is None:
        from kbsync.store import open_store

        store = open_store(settings)
    try:
        current, previous = pointer.read_aliases(_client(store), logical)
        if current is None:
            return None
        return pointer.ActiveRecord(logical, current, previous,
                                    build=read_build(store, current),
                                    previous_build=read_build(store, previous)
                                    if previous else {})
    finally:
        if own:
            store.close()


def pointer_mark(settings: Settings, store: VectorStore | None = None) -> object:
    """A value that changes whenever the active collection of ``settings`` may have changed,
    cheaper than :func:`resolve`: on the embedded engine the identities (inode, size, mtime)
    of the pointer file and of its copy, which a swap, a rollback or a restore replace by
    rename (a stat each, no read); on a server the two aliases (one request; ``store``: the
    open server store, which it needs there).

    Equal marks mean the same answer from :func:`resolve`, with one limit: a lost pointer
    without a copy (``refuse_if_orphaned``'s case) shows only when the pointer file changes.
    """
    logical = settings.logical_collection
    if store is not None and hasattr(store, "client"):
        return pointer.read_aliases(_client(store), logical)
    if settings.qdrant_url:
        raise TypeError("pointer_mark: a server's mark needs its open store")
    return tuple(_file_identity(path) for path in (
        pointer.pointer_path(settings.home, logical), pointer.mirror_path(settings.home, logical)))


def _file_identity(path: os.PathLike[str] | str) -> tuple[int, int, int] | None:
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def recover(settings: Settings) -> pointer.ActiveRecord | None:
    """The embedded pointer of ``settings.logical_collection`` from its second copy, when the
    pointer file itself is lost (deleted, or ``qdrant/`` restored without ``active/``).

    Unambiguous only when the copy names a collection that exists: then it is served, with
    one warning, and written back as the pointer when the store's write lock is free at
    once (never over a swap in progress). ``None``: no copy, or one naming a collection
    that is gone (:func:`refuse_if_orphaned` then decides).

    Raises:
        StoreError: the copy exists but cannot be read or parsed.
    """
    logical = settings.logical_collection
    copy = pointer.read_mirror(settings.home, logical)
    if copy is None or copy.active not in collection_names(settings):
        return None
    lost = pointer.pointer_path(settings.home, logical)
    written = _write_back(settings, copy)
    log.warning("active-collection pointer %s was lost: recovered from its copy %s "
                "(collection %s serves from %s, generation %d)%s", lost,
                pointer.mirror_path(settings.home, logical), logical, copy.active,
                copy.generation, "" if written else "; not written back yet (another kbsync "
                "writes the store now)")
    return copy


def _write_back(settings: Settings, record: pointer.ActiveRecord) -> bool:
    """Write ``record`` back as the pointer under the store's write lock, taken at once or not
    at all (a swap holds it while it writes both copies). False: not written."""
    from kbsync.catalog.lockfile import ingest_lock_path, write_lock
    from kbsync.errors import KbsyncError

    try:
        with write_lock(ingest_lock_path(settings, "*"), purpose="pointer recovery"):
            if pointer.read_pointer(settings.home, record.logical) is None:
                pointer.write_pointer(settings.home, record, mirror=False)
        return True
    except (KbsyncError, OSError) as exc:  # LockHeld, a read-only home: serve it anyway
        log.debug("pointer of %s not written back: %s", record.logical, exc)
        return False


def read_build(store: VectorStore, collection: str) -> dict[str, Any]:
    """The build record of ``collection`` (empty when it has none)."""
    records = StateStore(store, Settings.state_collection_of(collection)).read_meta(BUILD)
    return {k: records[0][k] for k in BUILD_FIELDS if k in records[0]} if records else {}


def write_build(store: VectorStore, collection: str, build: dict[str, Any], *,
                run_id: str) -> None:
    """Record the settings ``collection`` is built with (in its state collection)."""
    StateStore(store, Settings.state_collection_of(collection)).write_meta(
        BUILD, (), {**build, "collection": collection, "recorded_at": utc_now(),
                    "run_id": run_id})


def resolve(settings: Settings, store: VectorStore | None = None, *,
            warn: bool = True) -> Settings:
    """``settings`` aimed at the active collection, with its build settings in force.

    ``warn``: name the ``KBSYNC_*`` values the active collection overrides (off for
    ``kbsync rebuild``, whose environment holds the new settings on purpose).

    Raises:
        StoreError: an embedded pointer file that cannot be read.
        StoreUnavailable: the server's aliases cannot be read.
    """
    if settings.active_of is not None:
        return settings  # resolved already
    answer = _pinned_answer(settings)
    if answer is not None:
        return answer  # this command resolved these settings already (resolved())
    record = read_record(settings, store)
    if record is None:
        refuse_if_orphaned(settings, store)
        from kbsync.catalog.model_keep import keep_recorded_model

        return keep_recorded_model(settings, store)  # an upgrade's new default strands nothing
    result = aimed_at(settings, record)
    if warn:
        _warn_overrides(settings, result, record)
    return result


def pinned(settings: Settings) -> bool:
    """Whether :func:`resolve` of ``settings`` is answered in this context without reading
    the pointer (inside :func:`resolved`: the command decided it for its duration)."""
    return _pinned_answer(settings) is not None


def _pinned_answer(settings: Settings) -> Settings | None:
    answer = _answer.get()
    return answer[1] if answer is not None and answer[0] == settings else None


def aimed_at(settings: Settings, record: pointer.ActiveRecord) -> Settings:
    """``settings`` aimed at ``record``'s active collection, with its build settings."""
    return apply_build(settings.model_copy(update={
        "collection": record.active, "active_of": record.logical}), record.build)


@contextmanager
def resolved(configured: Settings, active: Settings) -> Iterator[None]:
    """Within the block (this thread's context), :func:`resolve` of settings equal to
    ``configured`` answers ``active`` without reading the pointer again.

    The CLI resolves once and runs the flow in process inside this block. The answer
    can only be as old as the command: a writer checks it again under its write lock
    (:func:`check_still_active`).
    """
    token = _answer.set((configured, active))
    try:
        yield
    finally:
        _answer.reset(token)


def _warn_overrides(configured: Settings, resolved: Settings,
                    record: pointer.ActiveRecord) -> None:
    """One warning per process naming ``KBSYNC_*`` values the active collection overrides."""
    given = configured.model_fields_set
    names = [name for name in BUILD_FIELDS
             if name in given and getattr(configured, name) != getattr(resolved, name)
             and not (name == "embed_model"
                      and configured.embed_model_name() == resolved.embed_model_name())]
    differ = [f"KBSYNC_{name.upper()}={getattr(configured, name)!s}" for name in names]
    key = (record.logical, record.active, tuple(differ))
    if differ and key not in _warned:
        _warned.add(key)
        # name only the settings that differ, each with the value the collection was built with
        built = ", ".join(f"{name}={_shown(getattr(resolved, name))}" for name in names)
        serving = (f"collection {record.logical}" if record.active == record.logical
                   else f"collection {record.logical} (served from {record.active})")
        log.warning("%s %s from %s, which was built with %s: serving it with its own "
                    "settings (kbsync rebuild applies new ones)", ", ".join(differ),
                    "differs" if len(differ) == 1 else "differ", serving, built)


def _shown(value: object) -> str:
    """A build setting as a person reads it: unset is the default."""
    return "default" if value is None else str(getattr(value, "value", value))


def check_still_active(settings: Settings, store: VectorStore | None = None) -> None:
    """Refuse to write when the active collection changed since ``settings`` were resolved
    (a rebuild swapped while this run waited for the write lock).

    Call under the write lock, before the first write.

    Raises:
        StoreUnavailable: the logical name now points elsewhere (retrying re-resolves).
    """
    logical = settings.logical_collection
    configured = settings.model_copy(update={"active_of": None, "collection": logical})
    record = read_record(configured, store)
    if record is None:
        refuse_if_orphaned(configured, store)  # lost meanwhile: name --restore, not "run again"
    now = record.active if record else logical
    if now != settings.collection:
        raise StoreUnavailable(
            f"collection {logical} now serves from {now}, not {settings.collection} (kbsync "
            "rebuild swapped them while this run waited for the write lock); run it again")


def generations(logical: str, names: list[str]) -> list[str]:
    """``logical`` (when present) then its rebuilt generations, oldest first."""
    built = sorted((n for n in names if pointer.is_generation_of(logical, n)),
                   key=lambda n: int(n.rsplit("__r", 1)[1]))
    return ([logical] if logical in names else []) + built


def collection_names(settings: Settings, store: VectorStore | None = None) -> list[str]:
    """The store's collection names. On the embedded engine a folder listing (whoever holds
    the store, and without creating it); on a server the open ``store``'s or a short-lived one's."""
    if not settings.qdrant_url:
        from kbsync.store.edge.query import CONFIG_FILE

        folder = settings.store_path
        if not folder.is_dir():
            return []
        return sorted(p.name for p in folder.iterdir() if (p / CONFIG_FILE).is_file())
    if isinstance(store, _Listing):
        return store.collection_names()
    from kbsync.store import open_store

    own = open_store(settings)
    try:
        return cast(_Listing, own).collection_names()  # a server store: it lists
    finally:
        own.close()


@runtime_checkable
class _Listing(Protocol):
    """A store that lists its collections (the server adapter; the embedded one is a folder)."""

    def collection_names(self) -> list[str]: ...


def _client(store: VectorStore) -> Any:
    """The server adapter's client, which reads the aliases (``read_record`` checked it has one)."""
    return getattr(store, "client")


def refuse_if_orphaned(settings: Settings, store: VectorStore | None = None) -> None:
    """Refuse to serve the logical collection when its pointer is lost (see module doc).

    Call only when no pointer was found (nor a second copy naming a live collection); one
    written since (a swap between the caller's read and this one) is no loss. Refused
    when rebuilt generations ``<logical>__r<N>`` exist and either the logical collection is
    gone or it was once replaced by a swap (:func:`was_replaced`): serving it would bring
    back what was deleted since and hide what was added, and the next ingest would write
    into it. A leftover shadow of a crashed first rebuild beside a never-replaced logical
    collection is not refused (the next rebuild resumes or drops it).

    Raises:
        StoreError: the pointer is lost and the active collection cannot be told; the
            message names the collections and the command that restores one.
    """
    logical = settings.logical_collection
    names = collection_names(settings, store)
    built = generations(logical, names)
    if not [n for n in built if n != logical]:
        return
    if logical in names and not was_replaced(settings, store):
        return
    if read_record(settings, store) is not None:
        # A swap wrote the pointer (then the build record) between this reader's first read
        # and now: it saw the store before the swap, and serves what was served then.
        return
    where = (f"alias {logical}{pointer.ACTIVE_SUFFIX}" if settings.qdrant_url
             else f"pointer {pointer.pointer_path(settings.home, logical)}")
    beside = "beside it" if logical not in names else "and it was replaced by one"
    raise StoreError(f"collection {logical} has no active {where}, but rebuilt collections "
                     f"{', '.join(n for n in built if n != logical)} exist {beside}; refusing "
                     f"to serve or build the wrong one: run `kbsync rebuild --restore "
                     f"{built[-1]}` (or the one that served last) to serve one again")


def was_replaced(settings: Settings, store: VectorStore | None = None) -> bool:
    """Whether a swap ever replaced the logical collection: the swap records the settings
    the replaced collection was built with in it (:func:`write_build`), and nothing else
    writes a build record into the logical collection (rebuilds write their shadows').

    Opens a short-lived store when ``store`` is ``None`` (only a lost pointer asks).
    """
    logical = settings.logical_collection
    if store is not None:
        return bool(StateStore(store, Settings.state_collection_of(logical)).read_meta(BUILD))
    from kbsync.store import open_store

    own = open_store(settings.model_copy(update={"collection": logical, "active_of": None}))
    try:
        return was_replaced(settings, own)
    finally:
        own.close()


def previous_collection(settings: Settings, store: VectorStore | None = None) -> str | None:
    """The collection ``kbsync rebuild --rollback`` would serve again, when it exists
    (``settings``: resolved; ``store``: open, for a server's aliases)."""
    logical = settings.logical_collection
    record = read_record(settings.model_copy(update={"active_of": None, "collection": logical}),
                         store)
    if record is None or record.previous in (None, settings.collection):
        return None
    return record.previous if record.previous in collection_names(settings, store) else None


def unserved_collections(settings: Settings, store: VectorStore | None = None) -> list[str]:
    """Generations of the logical collection that neither serve nor are kept for a rollback
    (a crashed or lost rebuild left them; ``kbsync verify`` names them)."""
    logical = settings.logical_collection
    record = read_record(settings.model_copy(update={"active_of": None, "collection": logical}),
                         store)
    served = {record.active, record.previous} if record else {logical}
    return [n for n in generations(logical, collection_names(settings, store))
            if n not in served]


def serving(settings: Settings, store: VectorStore | None = None) -> dict[str, Any]:
    """What a search of ``settings`` measures, for the evaluation's history and gate: the
    physical ``collection`` serving the ``logical`` name, the pointer's ``generation``, when
    it became active (``since``: the last swap, rollback or restore; ``None`` on a server
    or before any rebuild) and the ``previous`` collection a rollback would serve. Never
    raises: an unreadable pointer gives the settings' own collection."""
    try:
        record = read_record(settings, store)
    except (StoreError, OSError, ValueError) as exc:
        log.debug("serving: pointer of %s unreadable: %s", settings.logical_collection, exc)
        record = None
    if record is None:
        return {"logical": settings.logical_collection, "collection": settings.collection,
                "generation": 0, "since": None, "previous": None}
    return {"logical": record.logical, "collection": record.active,
            "generation": record.generation, "since": record.swapped_at,
            "previous": record.previous}
