"""``kbsync verify`` over a damaged embedded store: name the damage; with ``--repair`` set it
aside (moved, never deleted) so that the drift repair rebuilds what it held from the files.

What is found, and how (issue 37):

- :func:`find`: every sealed segment of the chunk and state collections whose files differ
  from their seal (sizes and BLAKE2b digests of the seal manifest,
  :mod:`kbsync.store.edge.seals`), read from the files, so a segment the engine cannot open
  is named too;
- :func:`unreadable`: the one-line error of a collection the engine cannot read through
  (a damage the manifest does not cover: a segment sealed before it, the appendable one).

What ``--repair`` sets aside, in ``<store>/<collection>.damaged-<UTC time>/``:

1. :func:`set_aside_segments`: the damaged sealed segments of the chunk collection (their
   points then count as missing, and :func:`kbsync.maintenance.repair.repair` rebuilds
   their documents from the files);
2. :func:`set_aside_collection`: the whole chunk collection when it still cannot be read
   through (every document is then rebuilt, :func:`kbsync.maintenance.repair.repair`);
3. the state collection's damage goes to :mod:`kbsync.maintenance.state_rebuild`.

Limits: only an embedded store held by this process (a server's files are not ours; a store
read through another process's relay is that process's to repair).
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from pathlib import Path

from kbsync.catalog.lock import WriteLocks, given_or_embedded
from kbsync.errors import StoreDamaged, StoreDrift
from kbsync.ingest.context import RunContext

log = logging.getLogger(__name__)

DAMAGE_ERRORS = (StoreDamaged, StoreDrift)
"""What a read of a damaged collection raises (the open checks, the engine's errors)."""


def _edge(runtime: RunContext):
    """The runtime's embedded store when this process holds it, else ``None``."""
    from kbsync.store.edge.store import EdgeStore

    return runtime.store if isinstance(runtime.store, EdgeStore) else None


def find(runtime: RunContext) -> list:
    """The damaged sealed segments of the chunk and state collections (``seals.Damage``)."""
    store = _edge(runtime)
    if store is None:
        return []
    return [*store.damaged_segments(runtime.collection),
            *store.damaged_segments(runtime.settings.state_collection)]


def unreadable(runtime: RunContext, name: str) -> str | None:
    """The one-line error of reading every point of collection ``name`` (``None``: it
    reads). A full read: the payloads are decoded, as a search would."""
    try:
        for _ in runtime.store.scroll(name):
            pass
    except DAMAGE_ERRORS as exc:
        return " ".join(str(exc).split())
    return None


def aside_folder(runtime: RunContext, name: str) -> Path:
    """Where the damage of collection ``name`` is set aside (beside its folder)."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return runtime.settings.store_path / f"{name}.damaged-{stamp}"


def set_aside_segments(runtime: RunContext, damaged: list, *,
                       locks: WriteLocks | None = None) -> tuple[Path | None, list[str]]:
    """Move the damaged sealed segments of the chunk collection aside; returns the folder
    and the segments (``(None, [])``: none of ``damaged`` is the chunk collection's).

    Raises:
        LockHeld: an ingest is running.
    """
    store = _edge(runtime)
    mine = [d for d in damaged if d.collection == runtime.collection]
    if store is None or not mine:
        return None, []
    aside = aside_folder(runtime, runtime.collection)
    with given_or_embedded(locks, runtime.settings).hold("*", "repair"):
        segments = store.set_aside_segments(runtime.collection, mine, aside)
    return aside, segments


def set_aside_collection(runtime: RunContext, name: str, *,
                         locks: WriteLocks | None = None) -> Path:
    """Rename collection ``name``'s folder aside (``<name>.damaged-<UTC time>``, kept);
    it then counts as missing. Closes its shard first.

    Raises:
        StoreDamaged: the store is not an embedded one this process holds.
        LockHeld: an ingest is running.
    """
    store = _edge(runtime)
    if store is None:
        raise StoreDamaged(f"collection {name!r} is damaged and its store is a server's or "
                           "another process's: repair it where it is held")
    folder = runtime.settings.store_path / name
    aside = aside_folder(runtime, name)
    with given_or_embedded(locks, runtime.settings).hold("*", "repair"):
        store.release(name)
        if aside.exists():  # two set-asides in one second: keep both
            aside = aside.with_name(aside.name + "-2")
        folder.rename(aside)
    log.warning("collection %s could not be read: set aside as %s", name, aside)
    return aside
