"""Per-document state kept in the vector store, and the fingerprints its records carry.

State lives in a companion collection (``<collection>_state``) of the same
store, one record per (namespace, doc_id), so every worker and any restored
store agree on it. Records carry a 1-dimensional constant vector only because
the engines require one; nobody searches them.

A document's record is current only when it carries :func:`expected_fingerprint`
of the run's settings; the plan rule that classifies files against these records
is ingest's (:func:`kbsync.ingest.classify.plan_files`).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import datetime, timezone
# a string as json.dumps spells it (ensure_ascii), without building an encoder each time
from json.encoder import encode_basestring_ascii as _json_str
from typing import Any, Iterable, Iterator, Mapping, Sequence

from kbsync.models import DocState, DocStatus
from kbsync.store.base import Filter, Match, Point, VectorStore

STATE_NAMESPACE = uuid.UUID("6f1c2d3e-4b5a-4c6d-8e7f-0a1b2c3d4e5f")
_STATE_NAMESPACE_BYTES = STATE_NAMESPACE.bytes
STATE_VECTOR = [1.0]
REPAIR_FINGERPRINT = "repair-requested"
"""Fingerprint ``kbsync verify --repair`` gives a drifted document's record: it matches no
settings, so the next ingest of its root reprocesses it (points and record stay meanwhile)."""
META_KEY = "meta"
"""Payload key of the non-document records of the state collection (root bindings, the
embedder identity: see :mod:`kbsync.catalog.identity`). They have no ``namespace`` key, so every
namespace-filtered read skips them; whoever scrolls the whole collection skips
:func:`is_meta` payloads."""

CHUNK_TOTAL = "chunk-total"
"""Meta kind holding a (namespace, root)'s ``documents`` and summed ``chunk_count``, so a
run's store check (:func:`kbsync.catalog.checks.check_root`) need not read every record.
It also keeps the root's listing as a clean run saw it (:mod:`kbsync.ingest.listing`).

Invariant: a root's record exists only while its sum is that of the root's records, and
while its records and remembered failures are those its listing's run compared. Every write
of document records through this class deletes the totals of their roots first
(:meth:`StateStore.commit`, :meth:`StateStore.remove`), as does every write of a remembered
failure (:mod:`kbsync.catalog.failed`); a root's run writes it anew after its last commit
(:meth:`StateStore.keep_chunk_total`), and a reader trusts it only while the root's records
number its ``documents`` (a removal by filter), and its sum only to confirm a match
(:meth:`StateStore.chunk_total`)."""


def is_meta(payload: Mapping[str, Any]) -> bool:
    """True for a meta record (root binding, embedder identity), not a document's state."""
    return META_KEY in payload


def stable_hash(value: Any) -> str:
    """sha256 of ``value`` as sorted, compact JSON (never ``str(dict)``)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def fingerprint(**shaping: Any) -> str:
    """Hash of everything that shapes a document's stored points.

    Callers pass converter version, chunk budget/overlap/max size, embedding
    provider, model and dimension. A change of any of them reprocesses every
    document (the embedding cache still saves unchanged texts).
    """
    return stable_hash(shaping)[:32]


OCR_OFF = "off"
"""The OCR key of a run without OCR (:meth:`kbsync.convert.ocr.OcrConfig.key`)."""


def document_fingerprint(base: str, ocr_key: str, scanned_pages: int | None) -> str:
    """The fingerprint one document's record must carry to be unchanged.

    OCR settings shape only the pages OCR reads, so they enter only the fingerprint of a
    document that had pages without a usable text layer: switching OCR on, or changing its
    languages, reprocesses exactly those documents, and no other. ``scanned_pages`` is
    ``None`` for a record written before OCR existed: nothing says whether it had such
    pages, so with OCR on a PDF's record never matches (each old PDF is read once more)
    and with it off any record matches on ``base`` (the caller decides which are PDFs by
    passing ``None`` only for them; see :func:`kbsync.ingest.classify.plan_files`).
    """
    if scanned_pages == 0 or (scanned_pages is None and ocr_key == OCR_OFF):
        return base
    return stable_hash({"base": base, "ocr": ocr_key})[:32]


def expected_fingerprint(previous: DocState, base: str, ocr_key: str) -> str:
    """The :func:`document_fingerprint` ``previous`` must carry to be unchanged under ``base``
    and ``ocr_key`` (a record without ``scanned_pages`` matters only for PDFs)."""
    scanned = previous.scanned_pages
    if scanned is None and not previous.doc_id.lower().endswith(".pdf"):
        scanned = 0  # only PDFs had pages without text before OCR existed
    return document_fingerprint(base, ocr_key, scanned)


def utc_now() -> str:
    """ISO-8601 UTC timestamp, second precision."""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


class StateStore:
    """Reads and writes :class:`DocState` records in the companion collection."""

    def __init__(self, store: VectorStore, collection: str) -> None:
        self._store = store
        self._collection = collection
        self._ready = False
        # the grants of each permission profile as stored, read once when first needed and
        # kept up to date by this process's writes (kbsync.catalog.access.record_profiles)
        self.profile_grants: dict[str, tuple[str, ...]] | None = None
        self.profile_records = 0  # the number of profile records when they were read
        # per (namespace, root): ids of the profiles whose grants this run's slices replaced
        self.regranted: dict[tuple[str, str], set[str]] = {}

    @property
    def store(self) -> VectorStore:
        """The store holding the state collection."""
        return self._store

    @property
    def collection(self) -> str:
        """The state collection's name."""
        return self._collection

    def _ensure(self) -> None:
        if not self._ready:
            self._store.ensure_collection(
                self._collection, dimension=1,
                keyword_indexes=("namespace", "root", "doc_id", "access"))
            self._ready = True

    @staticmethod
    def record_id(namespace: str, doc_id: str) -> str:
        """Deterministic point id of a document's state record: ``uuid5(STATE_NAMESPACE,
        json.dumps([namespace, doc_id]))``, spelled out (a plan slice asks for thousands, and
        ``uuid.uuid5`` builds two objects each; tests/catalog/test_state.py checks it is the
        same)."""
        digest = bytearray(hashlib.sha1(_STATE_NAMESPACE_BYTES + (
            f"[{_json_str(namespace)}, {_json_str(doc_id)}]").encode("utf-8")).digest()[:16])
        digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
        digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 4122 variant
        hex_ = digest.hex()
        return f"{hex_[:8]}-{hex_[8:12]}-{hex_[12:16]}-{hex_[16:20]}-{hex_[20:]}"

    def chunk_total(self, namespace: str, root: str, *, kept: bool = True) -> tuple[int, int]:
        """``(documents, chunks)``: how many document records ``root`` has and the sum of
        their ``chunk_count``.

        With ``kept``, the :data:`CHUNK_TOTAL` record of the root when there is one and the
        root's records still number its ``documents`` (one meta read, one index count);
        otherwise (and without ``kept``) the records are streamed past, none held or parsed
        whole. A kept total is trusted to confirm a match only: a caller whose check fails
        on it asks again with ``kept=False`` before it reports drift.
        """
        if self._store.collection_dimension(self._collection) is None:
            return 0, 0
        record = self.kept_total(namespace, root) if kept else None
        if record is not None:
            return int(record["documents"]), int(record["chunks"])
        flt = Filter.where(namespace=namespace, root=root)
        documents = chunks = 0
        for point in self._store.scroll(self._collection, flt):
            if not is_meta(point.payload):
                documents += 1
                chunks += int(point.payload.get("chunk_count") or 0)
        return documents, chunks

    def kept_total(self, namespace: str, root: str) -> dict[str, Any] | None:
        """The :data:`CHUNK_TOTAL` record of ``root`` while the root's records still number
        its ``documents`` (one meta read, one index count), else ``None``."""
        if self._store.collection_dimension(self._collection) is None:
            return None
        flt = Filter.where(namespace=namespace, root=root)
        for record in self.read_meta(CHUNK_TOTAL, total_namespace=namespace, total_root=root):
            if record.get("documents") == self._store.count(self._collection, flt):
                return record
        return None

    def keep_chunk_total(self, namespace: str, root: str,
                         listing: Mapping[str, Any] | None = None) -> bool:
        """Write the :data:`CHUNK_TOTAL` record of ``root`` when it has none (counted from
        its records), or to give it ``listing`` (the marks of a clean run,
        :mod:`kbsync.ingest.listing`); True when one was written. Call it only when no write
        to the root's records is in flight (a root's run, after its last commit): a commit
        between the count and the write would leave a stale total."""
        if self._store.collection_dimension(self._collection) is None:
            return False
        record = self.kept_total(namespace, root)
        if record is not None and (listing is None or record.get("listing") == listing):
            return False
        documents, chunks = ((int(record["documents"]), int(record["chunks"])) if record
                             else self.chunk_total(namespace, root, kept=False))
        payload: dict[str, Any] = {"total_namespace": namespace, "total_root": root,
                                   "documents": documents, "chunks": chunks}
        if listing is not None:
            payload["listing"] = dict(listing)
        self.write_meta(CHUNK_TOTAL, (namespace, root), payload)
        return True

    def forget_chunk_totals(self, namespace: str, root: str | None = None) -> None:
        """Delete the :data:`CHUNK_TOTAL` record of ``root`` (every root's: ``None``) of
        ``namespace``: what a removal of their records by filter does first."""
        self._forget_totals(namespace=namespace, root=root)

    def _forget_totals(self, pairs: Iterable[tuple[str, str]] = (), *,
                       namespace: str | None = None, root: str | None = None) -> None:
        """Delete the :data:`CHUNK_TOTAL` records of ``pairs`` (namespace, root), or of
        ``root`` (every root: ``None``) of ``namespace``: before any write to those roots'
        records, so a crash after it leaves no total at all, never a stale one."""
        if self._store.collection_dimension(self._collection) is None:
            return
        if namespace is not None:
            self._store.delete(self._collection, Filter.where(
                doc_id=f"<kbsync:{CHUNK_TOTAL}>", total_namespace=namespace,
                **({"total_root": root} if root is not None else {})))
        ids = [self.meta_id(CHUNK_TOTAL, pair) for pair in set(pairs)]
        if ids:
            self._store.delete_ids(self._collection, ids)

    def load(self, namespace: str, root: str | None = None) -> dict[str, DocState]:
        """Every record of ``namespace`` (and ``root`` when given), keyed by doc_id."""
        if self._store.collection_dimension(self._collection) is None:
            return {}
        flt = Filter.where(namespace=namespace, **({"root": root} if root else {}))
        return {p.payload["doc_id"]: DocState.from_payload(p.payload)
                for p in self._store.scroll(self._collection, flt) if not is_meta(p.payload)}

    def iter_records(self, namespace: str, root: str) -> Iterator[DocState]:
        """The document records of ``root`` one at a time, page by page (none held)."""
        if self._store.collection_dimension(self._collection) is None:
            return
        for point in self._store.scroll(self._collection, Filter.where(namespace=namespace,
                                                                       root=root)):
            if not is_meta(point.payload):
                yield DocState.from_payload(point.payload)

    def load_docs(self, namespace: str, doc_ids: Sequence[str], *,
                  per_query: int = 1_000) -> dict[str, DocState]:
        """The records of ``doc_ids`` that exist, keyed by doc_id: a plan slice reads the
        records of its own files only. A store that fetches payloads by id (the embedded
        one) is asked for the records' ids (:meth:`record_id`); any other gets one filtered
        scroll per ``per_query`` doc_ids."""
        if not doc_ids or self._store.collection_dimension(self._collection) is None:
            return {}
        fetch = getattr(self._store, "payload_list", None)
        found: dict[str, DocState] = {}
        for start in range(0, len(doc_ids), per_query):
            wanted = tuple(doc_ids[start:start + per_query])
            if fetch is not None:
                payloads = fetch(self._collection, [self.record_id(namespace, d) for d in wanted])
                records = [p for p in payloads if p.get("namespace") == namespace]
            else:
                flt = Filter.where(namespace=namespace).and_also(Match("doc_id", any_of=wanted))
                records = [p.payload for p in self._store.scroll(self._collection, flt)]
            for payload in records:
                if not is_meta(payload):
                    found[payload["doc_id"]] = DocState.from_payload(payload)
        return found

    def get(self, namespace: str, doc_id: str) -> DocState | None:
        """The record of one document, or ``None``."""
        if self._store.collection_dimension(self._collection) is None:
            return None
        hits = list(self._store.scroll(self._collection, Filter.where(namespace=namespace,
                                                                       doc_id=doc_id)))
        return DocState.from_payload(hits[0].payload) if hits else None

    def commit(self, states: Sequence[DocState]) -> None:
        """Write records (the last step of a document's write order)."""
        if not states:
            return
        self._ensure()
        self._forget_totals((s.namespace, s.root) for s in states)
        self._store.upsert(self._collection, [
            Point(id=self.record_id(s.namespace, s.doc_id), payload=s.to_payload(),
                  vector=STATE_VECTOR) for s in states])

    def read_meta(self, kind: str, *, page_size: int = 64, **match: str) -> list[dict[str, Any]]:
        """Payloads of the meta records of ``kind`` matching ``match`` (a keyword-index
        lookup on their shared ``doc_id`` marker, never a scan of the documents)."""
        if self._store.collection_dimension(self._collection) is None:
            return []
        flt = Filter.where(doc_id=f"<kbsync:{kind}>", **{META_KEY: kind}, **match)
        return [p.payload for p in self._store.scroll(self._collection, flt,
                                                      page_size=page_size)]

    def count_meta(self, kind: str) -> int:
        """How many records carry the ``doc_id`` marker of ``kind``'s meta records: one
        keyword-index count, nothing read (2 ms at 4k records; with :data:`META_KEY`
        checked too, an unindexed field, 20 ms). A change detector: only meta records of
        ``kind`` carry that marker."""
        if self._store.collection_dimension(self._collection) is None:
            return 0
        return self._store.count(self._collection, Filter.where(doc_id=f"<kbsync:{kind}>"))

    @staticmethod
    def meta_id(kind: str, key: Sequence[str]) -> str:
        """The point id of the meta record ``(kind, *key)``."""
        return str(uuid.uuid5(STATE_NAMESPACE, json.dumps([META_KEY, kind, *key])))

    def write_meta(self, kind: str, key: Sequence[str], payload: Mapping[str, Any]) -> None:
        """Insert or replace the meta record ``(kind, *key)``."""
        self._ensure()
        point_id = self.meta_id(kind, key)
        record = {**payload, META_KEY: kind, "doc_id": f"<kbsync:{kind}>"}
        self._store.upsert(self._collection, [Point(id=point_id, payload=record,
                                                    vector=STATE_VECTOR)])

    def forget_meta(self, kind: str, keys: Sequence[Sequence[str]]) -> None:
        """Delete the meta records ``(kind, *key)`` of ``keys`` (missing ones: nothing)."""
        ids = [self.meta_id(kind, key) for key in keys]
        if ids and self._store.collection_dimension(self._collection) is not None:
            self._store.delete_ids(self._collection, ids)

    def any_record(self, namespace: str, root: str) -> DocState | None:
        """One document record of ``root`` in ``namespace`` (the first page of one), or ``None``."""
        if self._store.collection_dimension(self._collection) is None:
            return None
        flt = Filter.where(namespace=namespace, root=root)
        for point in self._store.scroll(self._collection, flt, page_size=1):
            return DocState.from_payload(point.payload)
        return None

    def remove(self, namespace: str, doc_ids: Iterable[str]) -> None:
        """Delete records (after the documents' points are gone)."""
        ids = [self.record_id(namespace, d) for d in doc_ids]
        if ids and self._store.collection_dimension(self._collection) is not None:
            self._forget_totals(namespace=namespace)  # a doc_id does not name its root
            self._store.delete_ids(self._collection, ids)

    def namespaces(self) -> dict[str, dict[str, int]]:
        """Per namespace: number of documents and of ``partial`` ones."""
        out: dict[str, dict[str, int]] = {}
        if self._store.collection_dimension(self._collection) is None:
            return out
        for point in self._store.scroll(self._collection):
            if is_meta(point.payload):
                continue
            entry = out.setdefault(point.payload["namespace"], {"documents": 0, "partial": 0})
            entry["documents"] += 1
            entry["partial"] += point.payload.get("status") == DocStatus.PARTIAL.value
        return out
