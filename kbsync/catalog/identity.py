"""What a store is bound to: which path each root NAME stands for, which embedder built it.

Both live as meta records in the state collection (see :data:`kbsync.catalog.state.META_KEY`),
so they travel with the store like the document records do. This module reads them and
holds the checks; a run's check and its writes (:func:`kbsync.ingest.identity.check_run`,
:func:`~kbsync.ingest.identity.record_run`) are ingest's.

**Root bindings.** In each namespace a root NAME is bound to the resolved path it was
first synced from. A run that brings the same NAME from another path is refused with
:class:`~kbsync.errors.RootConflict` before anything is written (the second share would
overwrite the first one's documents, and full mode would delete the rest), unless the
run says the share moved (``rebind``): then the NAME is bound to the new path and the
documents stay (their doc_ids do not change). A store written before bindings existed
has none: the binding is inferred from one of the root's document records (its file
path minus its relative path) and recorded on the next real run.

**Overlaps across runs.** A root whose folder (symlinks resolved) is, holds or lies inside
the folder of a root bound under another NAME in the namespace is refused too: its files
would be indexed twice under two doc_ids. With ``rebind`` the new root replaces the old
one: the old root is removed (:func:`kbsync.ingest.remove.remove`) before the run writes
(see :mod:`kbsync.ingest.identity`).
A new NAME under which ``kbsync.api`` texts are stored (``NAME/...``) is refused, and so is
a root inside ``KBSYNC_HOME``. Interrupted removals of the namespace are finished first.

**Embedder identity.** A chunk collection records the embedding provider, model,
dimension and sparse-encoder version it was built with. Ingest, search (and so ask,
eval and the Python API) refuse another configured embedder with
:class:`~kbsync.errors.EmbedderMismatch`: vectors of two models are not comparable even
when their dimensions agree. The sparse encoder is not configured: a collection keeps
the one it records (:func:`sparse_encoder`), for writes and queries alike, until it is
rebuilt. A collection built before the record existed adopts the configured embedder
on its next ingest, with a warning, and the legacy sparse encoder its points were made
with; search on it is not checked.

Every check is one keyword-index lookup in the state collection, never a scroll of the
documents. Checks write nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from kbsync.errors import EmbedderMismatch, RootConflict
from kbsync.models import RootSpec, display_path
from kbsync.text.sparse import CURRENT, LEGACY, SPARSE_VERSION, SparseEncoder, encoder_for
from kbsync.catalog.state import StateStore
from kbsync.settings import Settings
from kbsync.store.memo import remember

if TYPE_CHECKING:  # the types only: importing this module stays as cheap as it was
    from kbsync.embed.base import Embedder
    from kbsync.store.base import VectorStore

log = logging.getLogger(__name__)

EMBEDDER = "embedder"
"""Meta kind of the embedder identity record (one per collection)."""
ROOT_BINDING = "root"
"""Meta kind of a root binding (one per namespace and root NAME)."""
RESERVED_ROOTS = ("<api>",)  # kbsync.api's pseudo-root: a directory root must not take it
CHANGE_MODEL_HINT = ("set KBSYNC_EMBED_PROVIDER/KBSYNC_EMBED_MODEL back to the store's; to "
                     "change models run `kbsync rebuild --queries FILE` (a shadow collection "
                     "swapped in behind an evaluation gate), or build a new collection with "
                     "KBSYNC_COLLECTION=<new name> and ingest there (docs/rebuilds.md)")


# -- embedder identity ------------------------------------------------------------------------
@dataclass(frozen=True)
class EmbedderIdentity:
    """What shapes the stored vectors: provider, model, dense dimension, sparse encoder."""

    provider: str
    model: str
    dimension: int
    sparse: str = SPARSE_VERSION

    def describe(self) -> str:
        """``provider/model (N dims, sparse V)``, as error messages show it."""
        return f"{self.provider}/{self.model} ({self.dimension} dims, sparse {self.sparse})"

    def to_payload(self) -> dict:
        """The meta record's fields."""
        return {"provider": self.provider, "model": self.model, "dimension": self.dimension,
                "sparse": self.sparse}

    @classmethod
    def from_payload(cls, payload: dict) -> "EmbedderIdentity":
        """Inverse of :meth:`to_payload`."""
        return cls(provider=str(payload["provider"]), model=str(payload["model"]),
                   dimension=int(payload["dimension"]), sparse=str(payload["sparse"]))


def stored_embedder(states: StateStore) -> EmbedderIdentity | None:
    """The embedder the collection records, or ``None`` (new store, or one from before
    the record existed)."""
    records = states.read_meta(EMBEDDER)
    return EmbedderIdentity.from_payload(records[0]) if records else None


def check_embedder(states: StateStore, service: Embedder, *,
                   collection: str) -> EmbedderIdentity | None:
    """Refuse a configured embedder that differs from the one ``collection`` was built with.

    Provider and model are compared before the dimension, so a mismatch is found
    without asking the service for its dimension (which may load a model or call an
    API).

    Returns:
        The stored identity, or ``None`` when the collection records none.
    Raises:
        EmbedderMismatch: provider, model, dimension or sparse encoder differ.
    """
    stored = stored_embedder(states)
    if stored is None:
        return None
    if (stored.provider, stored.model) != (service.provider, service.model) or \
            stored.dimension != service.dimension:
        configured = EmbedderIdentity(service.provider, service.model, service.dimension,
                                      sparse=stored.sparse)
        raise EmbedderMismatch(
            f"collection {collection} was built with {stored.describe()}, but the configured "
            f"embedder is {configured.describe()}; {CHANGE_MODEL_HINT}")
    encoder_for(stored.sparse)  # a version this release does not know is refused
    return stored


def sparse_encoder(states: StateStore, store, collection: str) -> SparseEncoder:
    """The sparse encoder ``collection`` is written and queried with.

    The recorded one; for a collection that records none, the legacy encoder when it
    holds points (they were made before the record existed) and the current one when
    it is new or empty.

    Raises:
        UsageError: the recorded version is unknown to this release.
    """
    return _encoder_of(stored_embedder(states), store, collection)


def _encoder_of(stored: EmbedderIdentity | None, store, collection: str) -> SparseEncoder:
    if stored is not None:
        return encoder_for(stored.sparse)
    return LEGACY if store.count(collection) else CURRENT


def check_query_embedder(store: VectorStore, service: Embedder, *,
                         collection: str) -> SparseEncoder:
    """:func:`check_embedder` for the query side, which knows only the chunk collection.

    The state collection's name is :meth:`kbsync.settings.Settings.state_collection_of`.

    The answer is kept per store object while the store has not been written
    (:func:`kbsync.store.memo.remember`; a store without a revision reads it every time).

    Returns:
        The collection's sparse encoder (:func:`sparse_encoder`), to encode the query.
    """
    # A search must not wait a batch's retries for the dimension probe of a dead endpoint:
    # probed here within the query budget, check_embedder then reads the known value.
    dimension = service.query_dimension()

    def check() -> SparseEncoder:
        stored = check_embedder(StateStore(store, Settings.state_collection_of(collection)),
                                service, collection=collection)
        return _encoder_of(stored, store, collection)

    # Kept until the store is written (kbsync.store.memo): the record is read once, not
    # once per search. A refusal is not kept: every search raises it again.
    return remember(store, ("embedder", collection, service.provider, service.model, dimension),
                    check)


# -- root bindings ------------------------------------------------------------------------------
@dataclass(frozen=True)
class RootBinding:
    """Root ``name`` of ``namespace`` stands for the directory ``path`` (resolved, as text)."""

    namespace: str
    name: str
    path: str


def check_roots(roots: Sequence[RootSpec], *, home: Path) -> None:
    """Checks that need no store: reserved or repeated names, overlapping roots, and a
    root holding ``KBSYNC_HOME`` (it would index the store's own files).

    Raises:
        RootConflict: any of these.
    """
    home = Path(home).expanduser().resolve()
    seen: dict[str, RootSpec] = {}
    for spec in roots:
        if spec.name in RESERVED_ROOTS:
            raise RootConflict(f"root name {spec.name} is reserved for kbsync.api texts; "
                               f"choose another with NAME=PATH")
        if spec.name in seen:
            raise RootConflict(f"two roots are named {spec.name} ({display_path(seen[spec.name].path)}"
                               f" and {display_path(spec.path)}); use NAME=PATH to tell them apart")
        seen[spec.name] = spec
        if home == spec.path or spec.path in home.parents:
            raise RootConflict(
                f"root {spec.name} ({display_path(spec.path)}) contains KBSYNC_HOME ({display_path(home)}): "
                "kbsync would index its own store; sync a folder that does not hold it, or "
                "move KBSYNC_HOME out of the share")
        if home in spec.path.parents:
            raise RootConflict(
                f"root {spec.name} ({display_path(spec.path)}) is inside KBSYNC_HOME "
                f"({display_path(home)}): kbsync would index its own store's files; sync a "
                "folder outside it")
    for i, first in enumerate(roots):
        for second in roots[i + 1:]:
            inner, outer = sorted((first, second), key=lambda s: len(s.path.parts), reverse=True)
            if inner.path == outer.path or outer.path in inner.path.parents:
                raise RootConflict(
                    f"roots {outer.name} ({display_path(outer.path)}) and {inner.name} "
                    f"({display_path(inner.path)}) overlap: their files would be indexed twice under "
                    "two names; sync one of them")


def bindings(states: StateStore, namespace: str) -> dict[str, str]:
    """Root name -> bound path text, for one namespace (one index lookup)."""
    return {r["root"]: r["path"]
            for r in states.read_meta(ROOT_BINDING, bound_namespace=namespace)}


def bound_roots(states: StateStore, namespace: str) -> set[str]:
    """The root NAMEs bound in ``namespace`` (one index lookup)."""
    return set(bindings(states, namespace))
