"""Dropping a share (one root of a namespace) or a whole namespace (``kbsync remove``).

Write order, the crash-safe one of :func:`kbsync.ingest.write.delete_documents`: an
intent record first (:data:`REMOVAL`, a meta record naming the target), then the
points, then the documents' state records, then their remembered failures
(:mod:`kbsync.catalog.failed`), then the root bindings (:mod:`kbsync.catalog.identity`), and
last the intent record. A crash in between leaves
records without points and the intent: ``kbsync verify --repair``, the next ingest of the
namespace or a second ``remove`` finishes the removal (:func:`finish_pending`) instead of
rebuilding the documents from their files; it never leaves searchable points without a
record. Points are
deleted by filter, so points of a document whose record was never committed (a
crash during its first write) go too. The embedding cache is left alone: it is
a cache, and it serves the texts again if the share comes back.

Callers hold the ingest's write lock (:func:`kbsync.catalog.lock.ingest_lock`) around
:func:`remove`; :func:`measure` only reads.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

from kbsync.catalog import failed
from kbsync.catalog.identity import ROOT_BINDING
from kbsync.catalog.state import META_KEY, StateStore, utc_now
from kbsync.store.base import Filter, VectorStore

log = logging.getLogger(__name__)

REMOVAL = "removal"
"""Meta kind of a removal's intent record: written before anything is deleted, deleted last."""
WHOLE_NAMESPACE = "*"  # the intent record's ``removal_root`` for a namespace removal


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


def known_roots(store: VectorStore, *, state_collection: str) -> dict[str, set[str]]:
    """Namespace -> the root NAMEs bound there, plus those of unfinished removals (one
    lookup of the meta records, never a scan of the documents). Writes nothing."""
    known: dict[str, set[str]] = {}
    if store.collection_dimension(state_collection) is None:
        return known
    for payload in StateStore(store, state_collection).read_meta(ROOT_BINDING):
        known.setdefault(str(payload["bound_namespace"]), set()).add(str(payload["root"]))
    for target in pending(store, state_collection=state_collection):
        if target.root is not None:
            known.setdefault(target.namespace, set()).add(target.root)
    return known


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
    StateStore(store, state_collection).write_meta(REMOVAL, _intent_key(target), {
        "removal_namespace": target.namespace, "removal_root": target.root or WHOLE_NAMESPACE,
        "requested_at": utc_now()})
    flt = target.records()
    if removed.chunks:
        store.delete(collection, flt)
    if removed.documents:
        # the kept chunk totals first: a crash between leaves none, never a stale one
        StateStore(store, state_collection).forget_chunk_totals(target.namespace, target.root)
        store.delete(state_collection, flt)
    # remembered failures (kbsync.catalog.failed): a share added again is converted again
    failed.forget_all(StateStore(store, state_collection), target.namespace, target.root)
    if removed.root_bindings:
        store.delete(state_collection, bindings_filter(target))
    store.delete(state_collection, _intent_filter(target.namespace, target))
    log.info("removed %s: %d documents, %d chunks, %d root bindings", target.describe(),
             removed.documents, removed.chunks, removed.root_bindings)
    return removed


def pending(store: VectorStore, *, state_collection: str, namespace: str | None = None
            ) -> list[Target]:
    """Removals that were started and never finished (their intent record is left)."""
    if store.collection_dimension(state_collection) is None:
        return []
    intents = [p.payload for p in store.scroll(state_collection, _intent_filter(namespace),
                                               page_size=64)]
    return [Target(i["removal_namespace"],
                   None if i["removal_root"] == WHOLE_NAMESPACE else i["removal_root"])
            for i in intents]


def finish_pending(store: VectorStore, *, collection: str, state_collection: str,
                   namespace: str) -> list[Removal]:
    """Finish every interrupted removal of ``namespace`` (caller holds its write lock).

    Returns:
        What each finished removal removed now (its documents' records, the points
        and bindings the interrupted one had not reached).
    """
    done = []
    for target in pending(store, state_collection=state_collection, namespace=namespace):
        log.warning("finishing the interrupted removal of %s", target.describe())
        done.append(remove(store, collection=collection, state_collection=state_collection,
                           target=target))
    return done


def _intent_key(target: Target) -> tuple[str, str]:
    return (target.namespace, target.root or WHOLE_NAMESPACE)


def _intent_filter(namespace: str | None, target: Target | None = None) -> Filter:
    """Intent records (:data:`REMOVAL`) of ``namespace`` (all when ``None``), or of ``target``."""
    match = {} if namespace is None else {"removal_namespace": namespace}
    if target is not None:
        match["removal_root"] = target.root or WHOLE_NAMESPACE
    return Filter.where(doc_id=f"<kbsync:{REMOVAL}>", **{META_KEY: REMOVAL}, **match)


def bindings_filter(target: Target) -> Filter:
    """The root-binding records of the target (see :mod:`kbsync.catalog.identity`).

    A binding records which path a root NAME stands for in a namespace; once
    the root's documents are gone it must go too, so that the NAME can be
    given to another share without ``--rebind``.
    """
    # StateStore.write_meta marks meta records with doc_id "<kbsync:KIND>" and META_KEY=KIND.
    return Filter.where(doc_id=f"<kbsync:{ROOT_BINDING}>", **{META_KEY: ROOT_BINDING},
                        bound_namespace=target.namespace,
                        **({"root": target.root} if target.root else {}))


def _count(store: VectorStore, collection: str, flt: Filter) -> int:
    if store.collection_dimension(collection) is None:
        return 0
    return store.count(collection, flt)
