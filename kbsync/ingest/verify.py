"""Does the store still hold what the state records say?

Two depths of the same question:

- :func:`check_collection` and :func:`check_root` (every ingest, cheap): whether
  the chunk collection exists while records do, then per (namespace, root) of
  the run the exact count of chunk points against the sum of the ``chunk_count``
  of the records the plan loaded anyway: one count per root, no chunk point
  read (measured: ~20 ms at 10k chunks; ``tests/bench/verify_bench.py``). Only
  when they disagree does :func:`damaged_documents` count the points of each
  of the root's documents to name the ones to reprocess. Drift that keeps a
  root's total (an orphan point making up for a lost one), or lies in roots
  that are not part of the run, is left to ``kbsync verify``.
- :func:`verify` (``kbsync verify``, thorough): reads every chunk point of the
  namespace, payload included, and compares each document's points with its
  record: their number, their chunk indexes (exactly ``0..n-1``), their ids
  (``kbsync.ingest.write.point_id`` recomputed from the stored text), zero-vector flags
  on a document whose status is ``ok``, and points whose document has no
  record at all (orphans). Repair lives in :mod:`kbsync.ingest.repair`.

The state collection may also hold records that are not document records
(root bindings, embedder identity): :func:`is_document_record` skips them.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Iterable, Mapping

from kbsync.models import DocState, DocStatus
from kbsync.store.base import Filter, VectorStore
from kbsync.ingest.write import point_id

log = logging.getLogger(__name__)

SHOW_DOC_IDS = 20
"""How many doc_ids a report lists per kind of drift (the counts are always complete)."""

_RESERVED_DOC_ID_PREFIXES = ("<kbsync:",)  # the doc_id marker of meta records (kbsync.ingest.state)
# Meta records (root bindings, embedder identity) say what they are in one of these fields
# (``kbsync.ingest.state.META_KEY`` is "meta"; the others are defence against older shapes).
_KIND_FIELDS = ("meta", "kind", "record_kind", "record_type")


class DriftKind(str, Enum):
    """One way a document's points can differ from its state record."""

    MISSING_POINTS = "missing_points"  # fewer points than chunk_count
    EXTRA_POINTS = "extra_points"  # more points than chunk_count
    BAD_CHUNK_INDEX = "bad_chunk_index"  # chunk indexes are not exactly 0..n-1
    WRONG_IDS = "wrong_ids"  # an id is not point_id(namespace, doc_id, index, text)
    FLAGGED_POINTS = "flagged_points"  # embedding_failed points on an `ok` document
    ORPHAN_POINTS = "orphan_points"  # points whose document has no state record


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
    return _load(store, state_collection, namespace)[0]


def _load(store: VectorStore, state_collection: str, namespace: str | None
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
               states: Mapping[str, DocState]) -> StoreCheck:
    """The cheap check of every ingest, for one root whose records the plan loaded anyway.

    One exact count (namespace and root filter, both indexed) against the sum of
    ``chunk_count`` over ``states``: no chunk point is read. A missing collection
    counts 0. Drift that keeps the total (an orphan making up for a lost point) is
    left to :func:`verify`.
    """
    stored = store.count(collection, Filter.where(namespace=namespace, root=root))
    check = StoreCheck(namespace=namespace, collection=collection, documents=len(states),
                       expected_chunks=sum(s.chunk_count for s in states.values()),
                       stored_chunks=stored, root=root)
    if not check.matches:
        log.warning("%s", check.describe())
    return check


def check_collection(ctx, namespace: str, *, create: bool = True) -> str | None:
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


# --- the thorough check of `kbsync verify` ----------------------------------------------------
@dataclass
class _DocPoints:
    """What the scan keeps of one document's points (never their vectors or texts)."""

    ids: list[str] = field(default_factory=list)
    indexes: list[Any] = field(default_factory=list)
    wrong_ids: int = 0
    flagged: int = 0


@dataclass
class NamespaceReport:
    """Drift of one namespace: per kind, ``doc_id -> number of points concerned``."""

    namespace: str
    states: dict[str, DocState] = field(default_factory=dict)
    points: int = 0
    drift: dict[DriftKind, dict[str, int]] = field(default_factory=dict)
    orphan_ids: list[str] = field(default_factory=list)

    def add(self, kind: DriftKind, doc_id: str, points: int) -> None:
        """Record ``points`` points of ``doc_id`` drifting in this way."""
        per_doc = self.drift.setdefault(kind, {})
        per_doc[doc_id] = per_doc.get(doc_id, 0) + points

    def to_reprocess(self) -> list[str]:
        """Recorded documents whose points must be rebuilt from their files."""
        return sorted({d for kind, docs in self.drift.items()
                       if kind is not DriftKind.ORPHAN_POINTS for d in docs})

    def drifted(self) -> int:
        """Number of documents (recorded or orphan) with any drift."""
        return len({d for docs in self.drift.values() for d in docs})

    def to_dict(self) -> dict:
        """JSON form: counts, then per kind its documents, points and first doc_ids."""
        return {
            "documents": len(self.states), "points": self.points, "drifted": self.drifted(),
            "drift": {kind.value: {"documents": len(docs), "points": sum(docs.values()),
                                   "doc_ids": sorted(docs)[:SHOW_DOC_IDS]}
                      for kind, docs in sorted(self.drift.items(), key=lambda kv: kv[0].value)},
        }


@dataclass
class VerifyReport:
    """The result of :func:`verify` (the JSON of ``kbsync verify --json``)."""

    collection: str
    collection_missing: bool
    namespaces: dict[str, NamespaceReport]

    def drifted(self) -> int:
        """Documents with drift, over every namespace checked (0: the store is sound)."""
        return sum(r.drifted() for r in self.namespaces.values())

    def to_dict(self) -> dict:
        """JSON form."""
        return {"collection": self.collection, "collection_missing": self.collection_missing,
                "drifted": self.drifted(),
                "namespaces": {ns: r.to_dict() for ns, r in sorted(self.namespaces.items())}}


def verify(store: VectorStore, *, collection: str, state_collection: str,
           namespace: str | None = None) -> VerifyReport:
    """Compare every state record with its points (all namespaces unless ``namespace``).

    Reads every chunk point of the namespace(s) with its payload once, page by
    page, keeping only ids, chunk indexes and two counters per document. Writes
    nothing.
    """
    records, known = _load(store, state_collection, namespace)
    if namespace is not None:
        records.setdefault(namespace, {})
    missing = store.collection_dimension(collection) is None
    scanned = _scan(store, collection, namespace) if not missing else {}
    reports: dict[str, NamespaceReport] = {}
    for ns in sorted(set(records) | set(scanned)):
        report = reports[ns] = NamespaceReport(ns, states=records.get(ns, {}))
        _compare(report, scanned.get(ns, {}), known.get(ns, set()))
    return VerifyReport(collection=collection,
                        collection_missing=missing and any(records.values()),
                        namespaces=reports)


def _scan(store: VectorStore, collection: str, namespace: str | None
          ) -> dict[str, dict[str, _DocPoints]]:
    """namespace -> doc_id -> what its points look like (orphans without doc_id under '')."""
    flt = Filter.where(namespace=namespace) if namespace is not None else None
    out: dict[str, dict[str, _DocPoints]] = defaultdict(lambda: defaultdict(_DocPoints))
    for point in store.scroll(collection, flt):
        payload = point.payload
        ns, doc_id = payload.get("namespace"), payload.get("doc_id")
        ns = ns if isinstance(ns, str) else ""
        doc = out[ns][doc_id if isinstance(doc_id, str) else ""]
        doc.ids.append(point.id)
        index, text = payload.get("chunk_index"), payload.get("text")
        doc.indexes.append(index)
        if not (isinstance(index, int) and isinstance(text, str) and isinstance(doc_id, str)
                and point.id == point_id(ns, doc_id, index, text)):
            doc.wrong_ids += 1
        doc.flagged += payload.get("embedding_failed") is True
    return out


def _compare(report: NamespaceReport, points: Mapping[str, _DocPoints],
             known: set[str]) -> None:
    """Fill ``report`` from its records and the scanned ``points``.

    Points are orphans only when no record of any kind names their doc_id.
    """
    report.points = sum(len(p.ids) for p in points.values())
    for doc_id, state in report.states.items():
        found = points.get(doc_id, _DocPoints())
        expected, have = state.chunk_count, len(found.ids)
        if have < expected:
            report.add(DriftKind.MISSING_POINTS, doc_id, expected - have)
        elif have > expected:
            report.add(DriftKind.EXTRA_POINTS, doc_id, have - expected)
        bad = _bad_indexes(found.indexes, expected)
        if bad:
            report.add(DriftKind.BAD_CHUNK_INDEX, doc_id, bad)
        if found.wrong_ids:
            report.add(DriftKind.WRONG_IDS, doc_id, found.wrong_ids)
        if found.flagged and state.status is DocStatus.OK:
            report.add(DriftKind.FLAGGED_POINTS, doc_id, found.flagged)
    for doc_id, found in points.items():
        if doc_id not in report.states and doc_id not in known:
            report.add(DriftKind.ORPHAN_POINTS, doc_id, len(found.ids))
            report.orphan_ids.extend(found.ids)


def _bad_indexes(indexes: Iterable[Any], expected: int) -> int:
    """Points whose chunk index is not an int in ``0..expected-1`` or repeats one."""
    seen: set[int] = set()
    bad = 0
    for index in indexes:
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < expected \
                or index in seen:
            bad += 1
        else:
            seen.add(index)
    return bad
