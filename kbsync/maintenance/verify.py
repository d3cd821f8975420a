"""Does the store still hold what the state records say? The thorough check.

:func:`verify` (``kbsync verify``) reads every chunk point of the namespace, payload
included, and compares each document's points with its record: their number, their chunk
indexes (exactly ``0..n-1``), their ids (:func:`kbsync.catalog.schema.point_id` recomputed
from the stored text), zero-vector flags on a document whose status is ``ok``, and points
whose document has no record at all (orphans). It writes nothing; repair lives in
:mod:`kbsync.maintenance.repair`. The cheap checks of every ingest are the catalog's
(:mod:`kbsync.catalog.checks`).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Iterable, Mapping

from kbsync.catalog.checks import load_records
from kbsync.catalog.schema import point_id
from kbsync.models import DocState, DocStatus
from kbsync.store.base import Filter, VectorStore

log = logging.getLogger(__name__)

SHOW_DOC_IDS = 20
"""How many doc_ids a report lists per kind of drift (the counts are always complete)."""


class DriftKind(str, Enum):
    """One way a document's points can differ from its state record."""

    MISSING_POINTS = "missing_points"  # fewer points than chunk_count
    EXTRA_POINTS = "extra_points"  # more points than chunk_count
    BAD_CHUNK_INDEX = "bad_chunk_index"  # chunk indexes are not exactly 0..n-1
    WRONG_IDS = "wrong_ids"  # an id is not point_id(namespace, doc_id, index, text)
    FLAGGED_POINTS = "flagged_points"  # embedding_failed points on an `ok` document
    ORPHAN_POINTS = "orphan_points"  # points whose document has no state record


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
    records, known = load_records(store, state_collection, namespace)
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
