"""Which physical collection a logical collection name serves from.

``KBSYNC_COLLECTION`` (``kbsync`` by default) is a *logical* name. Until the first
swap by ``kbsync rebuild`` it is also the physical chunk collection (and
``<name>_state`` its state collection). A rebuild writes a shadow ``<name>__r<N>``
(and ``<name>__r<N>_state``) and, when the evaluation lets it, makes it active:

- **Qdrant server or cluster, and qdrant-client's local mode**: the alias
  ``<name>__active`` names the active physical collection and ``<name>__previous``
  the one kept for a rollback. Both change in one ``update_collection_aliases``
  request, which the server applies atomically. (The alias cannot be ``<name>``
  itself: a store built before rebuilds existed holds a real collection of that
  name, and Qdrant has no rename.) qdrant-client's local mode supports aliases
  too, so the tests run this path for real.
- **Embedded engine** (qdrant-edge-py has no aliases): the pointer file
  ``$KBSYNC_HOME/active/<name>.json`` names the active and the previous
  collection; it is written to a temporary file, fsynced, renamed over the old one
  with ``os.replace`` and the folder fsynced, so a crash leaves the old or the new
  pointer, never a torn one. A second copy, ``$KBSYNC_HOME/qdrant/.active/<name>.json``
  (inside the store folder, so a backup of ``qdrant/`` carries it), is written the same
  way right after; it is read only when the first one is lost
  (:func:`kbsync.catalog.active.read_record` recovers the pointer from it). Each write
  bumps the record's ``generation``, so the newer of two records is known.

No pointer (no alias, no file) means "the logical name is the physical one", so
stores that were never rebuilt behave exactly as before. The embedded pointer also
carries each collection's *build* settings (embedding model, chunking), so
commands can serve the active collection with its own model without opening the
store first; on a server they live in the physical state collection (see
:mod:`kbsync.catalog.active`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kbsync.errors import StoreError
from kbsync.home import current_access, make_dir

log = logging.getLogger(__name__)

ACTIVE_SUFFIX = "__active"
PREVIOUS_SUFFIX = "__previous"
_GENERATION = re.compile(r"__r(\d+)$")


@dataclass(frozen=True)
class ActiveRecord:
    """What a logical name points to.

    ``build``/``previous_build``: the settings each collection was built with (the
    rebuild's overrides: embedding provider/model/dimensions, chunk budget, overlap,
    contextual text); empty when unknown (a collection from before rebuilds).
    """

    logical: str
    active: str
    previous: str | None = None
    build: dict[str, Any] = field(default_factory=dict)
    previous_build: dict[str, Any] = field(default_factory=dict)
    swapped_at: str | None = None
    generation: int = 0
    """Bumped by every swap, rollback and restore (0: a record from before generations)."""

    def rolled_back(self, now: str) -> ActiveRecord:
        """The record after a rollback: active and previous change places."""
        if self.previous is None:
            raise StoreError(f"collection {self.logical}: no previous collection to roll "
                             "back to (kbsync rebuild keeps one after a swap)")
        return ActiveRecord(self.logical, self.previous, self.active, dict(self.previous_build),
                            dict(self.build), now, self.generation)


def shadow_name(logical: str, existing: list[str]) -> str:
    """``<logical>__r<N>`` with N one above every generation in ``existing`` (names)."""
    generations = [int(m.group(1)) for name in existing
                   if name.startswith(logical + "__r") and (m := _GENERATION.search(name))
                   and name == f"{logical}__r{m.group(1)}"]
    return f"{logical}__r{max(generations, default=0) + 1}"


def is_generation_of(logical: str, name: str) -> bool:
    """True for a chunk collection a rebuild of ``logical`` made (``<logical>__r<N>``)."""
    match = _GENERATION.search(name)
    return match is not None and name == f"{logical}__r{match.group(1)}"


# -- embedded engine: the pointer file ------------------------------------------------------
def pointer_path(home: Path, logical: str) -> Path:
    """Where the embedded engine's pointer for ``logical`` lives."""
    return Path(home) / "active" / f"{logical}.json"


MIRROR_FOLDER = Path("qdrant") / ".active"
"""Where the pointer's second copy lives, under ``KBSYNC_HOME``: inside the store folder
(``Settings.store_path``), which a collection listing skips (no collection config)."""


def mirror_path(home: Path, logical: str) -> Path:
    """Where the second copy of ``logical``'s pointer lives (see the module doc)."""
    return Path(home) / MIRROR_FOLDER / f"{logical}.json"


def read_pointer(home: Path, logical: str) -> ActiveRecord | None:
    """The pointer of ``logical``, or ``None`` when there is none.

    Raises:
        StoreError: the file exists but cannot be read or parsed (it is never
            torn by a crash, so that means damage or a hand edit).
    """
    return _read(pointer_path(home, logical), logical)


def read_mirror(home: Path, logical: str) -> ActiveRecord | None:
    """The second copy of ``logical``'s pointer, or ``None`` when there is none.

    Raises:
        StoreError: as :func:`read_pointer`.
    """
    return _read(mirror_path(home, logical), logical)


def next_generation(home: Path, logical: str) -> int:
    """One above the generation of either copy of ``logical``'s pointer (unreadable: 0)."""
    seen = [0]
    for read in (read_pointer, read_mirror):
        try:
            record = read(home, logical)
        except StoreError:
            continue
        if record is not None:
            seen.append(record.generation)
    return max(seen) + 1


def _read(path: Path, logical: str) -> ActiveRecord | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreError(f"active-collection pointer {path}: cannot read: {exc}") from exc
    try:
        data = json.loads(text)
        return ActiveRecord(**data)
    except (ValueError, TypeError) as exc:
        raise StoreError(f"active-collection pointer {path}: not a pointer record ({exc}); "
                         "restore it or delete it to serve the collection named "
                         f"{logical}") from exc


def write_pointer(home: Path, record: ActiveRecord, *, mirror: bool = True) -> Path:
    """Replace the pointer of ``record.logical`` atomically (temp file, fsync, rename, fsync),
    then its second copy (``mirror``; only when the store folder exists: a pointer written
    before the first collection, by the model choice, gets its copy at the first swap).

    Readers see the old record or the new one, never a mix; after a crash the
    pointer is one of the two, and the copy is the same record or the one before.
    Returns the pointer's path.
    """
    path = pointer_path(home, record.logical)
    _write_atomic(path, record)
    log.info("collection %s now serves from %s (pointer %s)", record.logical, record.active,
             path)
    copy = mirror_path(home, record.logical)
    if mirror and copy.parent.parent.is_dir():
        _write_atomic(copy, record)
    return path


def _write_atomic(path: Path, record: ActiveRecord) -> None:
    """Write ``record`` to ``path``: temp file, fsync, rename, fsync of the folder."""
    make_dir(path.parent)
    data = json.dumps(asdict(record), sort_keys=True, indent=1).encode("utf-8")
    fd, tmp = tempfile.mkstemp(prefix=f".{record.logical}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, current_access().file_mode)  # mkstemp's 0600, or 0660 in a shared home
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)  # the rename itself survives a power cut


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- Qdrant server / local mode: aliases -----------------------------------------------------
def read_aliases(client: Any, logical: str) -> tuple[str | None, str | None]:
    """(active, previous) physical names from the aliases of ``logical`` (``None``: none).

    Raises:
        StoreUnavailable: the server cannot be reached (like every other store call).
    """
    from kbsync.store.server.query import errors

    with errors("read aliases", logical):
        names = {a.alias_name: a.collection_name for a in client.get_aliases().aliases}
    return names.get(logical + ACTIVE_SUFFIX), names.get(logical + PREVIOUS_SUFFIX)


def swap_aliases(client: Any, logical: str, *, active: str, previous: str | None) -> None:
    """Point ``<logical>__active`` at ``active`` and ``<logical>__previous`` at ``previous``
    in one request (the server applies it atomically)."""
    from qdrant_client import models

    from kbsync.store.server.query import errors

    with errors("read aliases", logical):
        current = {a.alias_name for a in client.get_aliases().aliases}
    ops: list[Any] = [models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=n))
                      for n in (logical + ACTIVE_SUFFIX, logical + PREVIOUS_SUFFIX)
                      if n in current]
    ops.append(models.CreateAliasOperation(create_alias=models.CreateAlias(
        collection_name=active, alias_name=logical + ACTIVE_SUFFIX)))
    if previous is not None:
        ops.append(models.CreateAliasOperation(create_alias=models.CreateAlias(
            collection_name=previous, alias_name=logical + PREVIOUS_SUFFIX)))
    with errors("swap aliases", logical):
        client.update_collection_aliases(change_aliases_operations=ops)
    log.info("collection %s now serves from %s (alias %s%s)", logical, active, logical,
             ACTIVE_SUFFIX)
