"""The collection checks: does the store still hold what the state records say?

The cheap checks of every ingest (:func:`check_collection`, :func:`check_root`): whether
the chunk collection exists while records do, then per (namespace, root) of the run the
exact count of chunk points against the sum of the ``chunk_count`` of the records the plan
loaded anyway: one count per root, no chunk point read (measured: ~20 ms at 10k chunks;
``tests/bench/verify_bench.py``). Only when they disagree does :func:`damaged_documents`
count the points of each of the root's documents to name the ones to reprocess. Drift
that keeps a root's total (an orphan point making up for a lost one), or lies in roots
that are not part of the run, is left to the thorough check of ``kbsync verify``
(:mod:`kbsync.maintenance.verify`). Checks write nothing, except that
:func:`check_collection` re-creates a missing chunk collection (empty) when asked to.

The state collection may also hold records that are not document records
(root bindings, embedder identity): :func:`is_document_record` skips them.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Protocol

from kbsync.models import DocState
from kbsync.store.base import Filter, VectorStore

log = logging.getLogger(__name__)

# The doc_id marker of meta records (kbsync.catalog.state).
_RESERVED_DOC_ID_PREFIXES = ("<kbsync:",)
# Meta records (root bindings, embedder identity) say what they are in one of these fields
# (``kbsync.catalog.state.META_KEY`` is "meta"; the others are defence against older shapes).
_KIND_FIELDS = ("meta", "kind", "record_kind", "record_type")


def is_document_record(payload: Mapping[str, Any]) -> bool:
    """True for a per-document state record, False for any other record kind.

    A document record has a string ``doc_id`` (not the ``<kbsync:`` marker of
    meta records), a string ``namespace``, an integer ``chunk_count``, and no
    kind field (``meta``) saying it is something else.
    """
    doc_id = payload.get("doc_id")
    if not isinstance(doc_id, str) or not doc_id or doc_id.startswith(_RESERVED_DOC_ID_PREFIXES):
        return False
    if not isinstance(payload.get("chunk_count"), int) or not isinstance(
            payload.get("namespace"), str):
        return False
    return all(payload.get(key) in (None, "document", "doc") for key in _KIND_FIELDS)


def load_documents(store: VectorStore, state_collection: str, namespace: str | None = None
                   ) -> dict[str, dict[str, DocState]]:
    """Document records per namespace, keyed by doc_id (other record kinds skipped)."""
    return load_records(store, state_collection, namespace)[0]


def load_records(store: VectorStore, state_collection: str, namespace: str | None
          ) -> tuple[dict[str, dict[str, DocState]], dict[str, set[str]]]:
    """Document records per namespace, and every doc_id any record names (of any kind).

    The second set keeps a point from being called an orphan (and deleted by
    repair) just because its record is of a kind this module does not know.
    """
    docs: dict[str, dict[str, DocState]] = defaultdict(dict)
    known: dict[str, set[str]] = defaultdict(set)
    if store.collection_dimension(state_collection) is None:
        return {}, {}
    flt = Filter.where(namespace=namespace) if namespace is not None else None
    for point in store.scroll(state_collection, flt):
        payload = point.payload
        if isinstance(payload.get("doc_id"), str):
            known[str(payload.get("namespace"))].add(payload["doc_id"])
        if is_document_record(payload):
            state = DocState.from_payload(payload)
            docs[state.namespace][state.doc_id] = state
    return dict(docs), dict(known)


# --- the cheap check of every ingest ---------------------------------------------------------
@dataclass(frozen=True)
class StoreCheck:
    """One root's (or namespace's) chunk count against its state records' sum."""

    namespace: str
    collection: str
    documents: int
    expected_chunks: int
    stored_chunks: int
    root: str | None = None

    @property
    def matches(self) -> bool:
        """True when the counts agree."""
        return self.expected_chunks == self.stored_chunks

    def describe(self) -> str:
        """One line saying what differs."""
        where = f"namespace {self.namespace}" + (f", root {self.root}" if self.root else "")
        return (f"store drift in {where}: the state records {self.expected_chunks} chunks of "
                f"{self.documents} documents, the store holds {self.stored_chunks}")


def check_root(store: VectorStore, collection: str, namespace: str, root: str,
               states: Iterable[DocState] | Mapping[str, DocState] | tuple[int, int], *,
               warn: bool = True) -> StoreCheck:
    """The cheap check of every ingest, for one root, over its records: a mapping of them by
    doc_id, records read once, or their ``(documents, chunks)`` summed already
    (:meth:`kbsync.catalog.state.StateStore.chunk_total`).

    One exact count (namespace and root filter, both indexed) against the sum of
    ``chunk_count`` over ``states``: no chunk point is read. A missing collection
    counts 0. Drift that keeps the total (an orphan making up for a lost point) is
    left to :func:`kbsync.maintenance.verify.verify`. ``warn``: log a failed check (off
    for a check on a kept total, confirmed on the records before drift is reported).
    """
    documents = expected = 0
    if isinstance(states, tuple):
        documents, expected = states
    else:
        for state in (states.values() if isinstance(states, Mapping) else states):
            documents += 1
            expected += state.chunk_count
    stored = store.count(collection, Filter.where(namespace=namespace, root=root))
    check = StoreCheck(namespace=namespace, collection=collection, documents=documents,
                       expected_chunks=expected, stored_chunks=stored, root=root)
    if warn and not check.matches:
        log.warning("%s", check.describe())
    return check


class _StateName(Protocol):
    @property
    def state_collection(self) -> str: ...


class CollectionContext(Protocol):
    """What :func:`check_collection` uses of an :class:`kbsync.ingest.context.IngestContext`
    (the catalog cannot name the ingest wing's type)."""

    @property
    def store(self) -> VectorStore: ...

    @property
    def collection(self) -> str: ...

    @property
    def config(self) -> _StateName: ...

    def ensure_collection(self) -> None: ...


def check_collection(ctx: CollectionContext, namespace: str, *,
                     create: bool = True) -> str | None:
    """Before a run: a warning when the chunk collection is missing while ``namespace`` has
    records, after re-creating it (empty) so the plan's repairs can write into it.

    Args:
        ctx: an :class:`kbsync.ingest.context.IngestContext`.
        create: false for a dry run, which writes nothing: the warning then says the
            collection would be re-created.

    Cost: the collection lookup and one exact count of the namespace's state records.
    """
    state_collection = ctx.config.state_collection
    missing = ctx.store.collection_dimension(ctx.collection) is None
    if create:
        ctx.ensure_collection()
    if not missing or ctx.store.collection_dimension(state_collection) is None:
        return None
    recorded = ctx.store.count(state_collection, Filter.where(namespace=namespace))
    if not recorded:
        return None
    done = "re-created empty" if create else "a run would re-create it empty"
    warning = (f"store drift in namespace {namespace}: the chunk collection "
               f"{ctx.collection!r} was missing while {recorded} documents are recorded "
               f"({done}; their documents are rebuilt from their files)")
    log.warning("%s", warning)
    return warning


def damaged_documents(store: VectorStore, collection: str, namespace: str,
                      states: Mapping[str, DocState]) -> list[str]:
    """doc_ids of ``states`` whose number of stored points differs from ``chunk_count``.

    One exact count per document (none when the namespace holds no point at
    all): run it only when :func:`check_root` found a difference.
    """
    if store.collection_dimension(collection) is None or not store.count(
            collection, Filter.where(namespace=namespace)):
        return sorted(d for d, s in states.items() if s.chunk_count)
    return sorted(d for d, s in states.items() if store.count(
        collection, Filter.where(namespace=namespace, doc_id=d)) != s.chunk_count)
