"""Dropping a share (one root of a namespace) or a whole namespace (``kbsync remove``).

Write order, the crash-safe one of :func:`kbsync.ingest.write.delete_documents`: the
points go first, then the documents' state records, then the root bindings
(:mod:`kbsync.ingest.identity`). A crash in between leaves records without points,
which a second ``remove`` (or the next full ingest of the root) removes
idempotently; it never leaves searchable points without a record. Points are
deleted by filter, so points of a document whose record was never committed (a
crash during its first write) go too. The embedding cache is left alone: it is
a cache, and it serves the texts again if the share comes back.

Callers hold the ingest's write lock (:func:`kbsync.ingest.lock.ingest_lock`) around
:func:`remove`; :func:`measure` only reads.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

from kbsync.store.base import Filter, VectorStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Target:
    """What to drop: every document of ``namespace``, or only those of root ``root`` in it."""

    namespace: str
    root: str | None = None

    def describe(self) -> str:
        """``root 'docs' of namespace 'default'`` or ``namespace 'team-a'``."""
        if self.root is None:
            return f"namespace {self.namespace!r}"
        return f"root {self.root!r} of namespace {self.namespace!r}"

    def records(self) -> Filter:
        """Chunks and document records of the target (meta records have no namespace)."""
        return Filter.where(namespace=self.namespace, **({"root": self.root} if self.root
                                                         else {}))


@dataclass
class Removal:
    """What :func:`measure` found or :func:`remove` removed (``kbsync remove --json``)."""

    collection: str
    namespace: str
    root: str | None
    documents: int = 0
    chunks: int = 0
    root_bindings: int = 0

    def empty(self) -> bool:
        """True when there is nothing to remove."""
        return not (self.documents or self.chunks or self.root_bindings)

    def to_dict(self) -> dict:
        """JSON form."""
        return asdict(self)


def measure(store: VectorStore, *, collection: str, state_collection: str,
            target: Target) -> Removal:
    """Count what :func:`remove` would remove. Writes nothing."""
    flt = target.records()
    return Removal(collection=collection, namespace=target.namespace, root=target.root,
                   documents=_count(store, state_collection, flt),
                   chunks=_count(store, collection, flt),
                   root_bindings=_count(store, state_collection, bindings_filter(target)))


def remove(store: VectorStore, *, collection: str, state_collection: str,
           target: Target) -> Removal:
    """Delete the target's points, then its document records, then its root bindings.

    Returns:
        What was removed (counted just before each deletion, under the caller's lock).
    Raises:
        KbsyncError: a store failure; a second call finishes the job.
    """
    removed = measure(store, collection=collection, state_collection=state_collection,
                      target=target)
    flt = target.records()
    if removed.chunks:
        store.delete(collection, flt)
    if removed.documents:
        store.delete(state_collection, flt)
    if removed.root_bindings:
        store.delete(state_collection, bindings_filter(target))
    log.info("removed %s: %d documents, %d chunks, %d root bindings", target.describe(),
             removed.documents, removed.chunks, removed.root_bindings)
    return removed


def bindings_filter(target: Target) -> Filter:
    """The root-binding records of the target (see :mod:`kbsync.ingest.identity`).

    A binding records which path a root NAME stands for in a namespace; once
    the root's documents are gone it must go too, so that the NAME can be
    given to another share without ``--rebind``.
    """
    from kbsync.ingest.identity import ROOT_BINDING
    from kbsync.ingest.state import META_KEY

    # StateStore.write_meta marks meta records with doc_id "<kbsync:KIND>" and META_KEY=KIND.
    return Filter.where(doc_id=f"<kbsync:{ROOT_BINDING}>", **{META_KEY: ROOT_BINDING},
                        bound_namespace=target.namespace,
                        **({"root": target.root} if target.root else {}))


def _count(store: VectorStore, collection: str, flt: Filter) -> int:
    if store.collection_dimension(collection) is None:
        return 0
    return store.count(collection, flt)
