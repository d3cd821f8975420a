"""The per-document write order: upsert new points, delete stale ones, commit state.

Invariant: until a document's state is committed, its previous version stays
searchable; a crash at any point leaves the old state, and re-running redoes the
document idempotently because point ids are deterministic (uuid5 over namespace,
doc_id, chunk index, text hash). Nothing here deletes a document because something
failed. Tested by (a store failure between upsert and commit; the re-run converges
on a clean run's index)
``tests/ingest/test_runner.py::test_a_failure_between_upsert_and_commit_converges_on_rerun``
and (a failed file keeps its previous version, searchable)
``tests/ingest/test_sync.py::test_failing_file_keeps_its_previous_version``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from kbsync.models import Chunk, DocState, DocStatus, SourceFile
from kbsync.text.context import contextual_text
from kbsync.text.sparse import SparseEncoder
from kbsync.ingest.state import StateStore, utc_now
from kbsync.store.base import Filter, Point, VectorStore

if TYPE_CHECKING:
    from kbsync.embed.service import EmbedOutcome

log = logging.getLogger(__name__)

POINT_NAMESPACE = uuid.UUID("1b6f2a8e-0d4c-4f3b-9a57-7c2e5d9e8a10")
# root: the per-root store check counts by it; root, folders, source_type: query-time filters
CHUNK_INDEXES = ("namespace", "doc_id", "root", "folders", "source_type")
CHUNK_BOOL_INDEXES = ("embedding_failed",)  # every search filters on it: index it
CHUNK_INTEGER_INDEXES = ("modified", "payload_version")  # --modified-since; old-point check
PAYLOAD_VERSION = 2
"""Version of the chunk payload's shape; it enters the settings fingerprint, so raising it
makes the next ingest rewrite every document once (embeddings come from the cache).
2: ``folders``, ``modified`` and ``payload_version`` added (query-time filters)."""


def folders_of(rel_path: str) -> list[str]:
    """The ancestor folders of a root-relative POSIX path, outermost first.

    ``"docs/api/x.md"`` -> ``["docs", "docs/api"]``; a file at the root has none.
    Stored as the ``folders`` keyword array, so ``--path-prefix docs/api`` is one
    exact keyword match (Qdrant has no prefix match on keywords).
    """
    parts = rel_path.split("/")[:-1]
    return ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def point_id(namespace: str, doc_id: str, chunk_index: int, text: str) -> str:
    """Deterministic point id: uuid5 over (namespace, doc_id, chunk index, text hash)."""
    text_hash = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return str(uuid.uuid5(POINT_NAMESPACE, json.dumps([namespace, doc_id, chunk_index, text_hash])))


@dataclass
class PreparedDoc:
    """A document ready to be written: its chunks and one vector per chunk."""

    source: SourceFile
    chunks: list[Chunk]
    vectors: list[list[float]]
    failed: list[bool]
    title: str = ""
    source_type: str = ""
    extra_payload: dict = field(default_factory=dict)
    contextual: bool = False  # index title + heading path + text (kbsync.text.context)
    ocr_pages: dict[int, float] = field(default_factory=dict)  # page -> OCR confidence
    scanned_pages: int = 0  # pages without a usable text layer (kbsync.models.Document)

    @property
    def status(self) -> DocStatus:
        """``partial`` when any chunk carries the zero-vector fallback."""
        return DocStatus.PARTIAL if any(self.failed) else DocStatus.OK

    def indexed_text(self, chunk: Chunk) -> str:
        """What ``chunk`` is embedded and BM25-encoded as (its stored text stays as is)."""
        if not self.contextual:
            return chunk.text
        return contextual_text(chunk.text, title=self.title, heading_path=chunk.heading_path)


def build_points(doc: PreparedDoc, namespace: str, *, sparse: SparseEncoder) -> list[Point]:
    """The points of one document (payload = the citation fields plus bookkeeping).

    Every payload string is valid UTF-8: ``path`` is the display form of the
    file's path (undecodable bytes as ``\\xNN``, like the doc_id), never the raw
    OS path, which the engines refuse.

    Each point carries the dense vector and the BM25 sparse vector of its text, by the
    collection's own ``sparse`` encoder (:func:`kbsync.ingest.identity.sparse_encoder`;
    the collection must have ``sparse=True``).
    """
    points = []
    for chunk, vector, failed in zip(doc.chunks, doc.vectors, doc.failed, strict=True):
        payload = {
            "namespace": namespace, "doc_id": doc.source.doc_id, "root": doc.source.root,
            "path": doc.source.display, "rel_path": doc.source.rel_path,
            "chunk_index": chunk.chunk_index, "text": chunk.text,
            "heading_path": chunk.heading_path, "page_start": chunk.page_start,
            "page_end": chunk.page_end, "content_hash": doc.source.content_hash,
            "embedding_failed": failed, "title": doc.title, "source_type": doc.source_type,
            "folders": folders_of(doc.source.rel_path), "modified": doc.source.mtime_ns // 10**9,
            "payload_version": PAYLOAD_VERSION, **doc.extra_payload, **ocr_payload(doc, chunk),
        }
        points.append(Point(id=point_id(namespace, doc.source.doc_id, chunk.chunk_index,
                                        chunk.text), payload=payload, vector=vector,
                            sparse=sparse.encode_document(doc.indexed_text(chunk))))
    return points


def ocr_payload(doc: PreparedDoc, chunk: Chunk) -> dict:
    """``ocr: true`` and ``ocr_confidence`` (the lowest of its OCR'd pages' mean word
    confidence, 0-100) for a chunk on a page OCR read; nothing for any other chunk, so
    stores written before OCR existed need no rewrite."""
    if not doc.ocr_pages or chunk.page_start is None:
        return {}
    end = chunk.page_end if chunk.page_end is not None else chunk.page_start
    scores = [doc.ocr_pages[p] for p in range(chunk.page_start, end + 1) if p in doc.ocr_pages]
    return {"ocr": True, "ocr_confidence": min(scores)} if scores else {}


def write_document(
    doc: PreparedDoc,
    *,
    store: VectorStore,
    states: StateStore,
    collection: str,
    namespace: str,
    fingerprint: str,
    run_id: str,
    sparse: SparseEncoder,
) -> DocState:
    """Replace one document in the store, in the crash-safe order.

    1. upsert the new points (old and new coexist: the old version still answers);
    2. delete this document's points that are not in the new set;
    3. commit the state record.

    ``fingerprint`` is the document's own (:func:`kbsync.ingest.state.document_fingerprint`),
    recorded with its ``scanned_pages``.

    Returns:
        The committed state.
    Raises:
        KbsyncError: a store failure; the previous state is then left as it was.
    """
    points = build_points(doc, namespace, sparse=sparse)
    store.upsert(collection, points)
    keep = {p.id for p in points}
    flt = Filter.where(namespace=namespace, doc_id=doc.source.doc_id)
    stale = [p.id for p in store.scroll(collection, flt, with_payload=False) if p.id not in keep]
    if stale:
        store.delete_ids(collection, stale)
    state = DocState(
        doc_id=doc.source.doc_id, namespace=namespace, root=doc.source.root,
        path=doc.source.display, content_hash=doc.source.content_hash or "",
        fingerprint=fingerprint, chunk_count=len(points), status=doc.status,
        updated_at=utc_now(), run_id=run_id, size=doc.source.size,
        mtime_ns=doc.source.mtime_ns, scanned_pages=doc.scanned_pages,
    )
    states.commit([state])
    log.debug("wrote %s: %d points, %d stale removed", doc.source.doc_id, len(points), len(stale))
    return state


def delete_documents(
    doc_ids: Sequence[str], *, store: VectorStore, states: StateStore, collection: str,
    namespace: str,
) -> int:
    """Remove documents: their points first, then their state records.

    A crash between the two leaves a record without points, which the next run
    sees as missing again and deletes idempotently.

    Returns:
        The number of documents removed.
    """
    for doc_id in doc_ids:
        store.delete(collection, Filter.where(namespace=namespace, doc_id=doc_id))
    states.remove(namespace, doc_ids)
    return len(doc_ids)


def touch_states(sources: Sequence[SourceFile], previous: Sequence[DocState],
                 states: StateStore) -> None:
    """Record a new size/mtime for files whose content hash proved unchanged.

    This keeps the next run's quick stat check hash-free after a ``touch`` or copy.
    """
    updated = []
    for source, state in zip(sources, previous, strict=True):
        if (state.size, state.mtime_ns) != (source.size, source.mtime_ns):
            updated.append(DocState(**{**state.__dict__, "size": source.size,
                                       "mtime_ns": source.mtime_ns}))
    states.commit(updated)


def heal_document(
    source: SourceFile, previous: DocState, *, store: VectorStore, states: StateStore,
    service, collection: str, namespace: str, run_id: str, sparse: SparseEncoder,
    contextual: bool = False,
) -> tuple[DocState, EmbedOutcome]:
    """Re-embed the zero-vector chunks of an unchanged ``partial`` document.

    No conversion or chunking: the flagged points' stored texts are embedded
    again and upserted under the same ids. The state becomes ``ok`` only when
    no flagged point is left. With ``contextual`` the texts are rebuilt from the
    payload's title and heading path exactly as :meth:`PreparedDoc.indexed_text`
    built them, so a healed point's vectors equal a fresh write's.

    Returns:
        The committed state and the embedding outcome (for the counters).
    """
    flt = Filter.where(namespace=namespace, doc_id=source.doc_id, embedding_failed=True)
    flagged = list(store.scroll(collection, flt))
    texts = [_stored_indexed_text(p.payload, contextual) for p in flagged]
    outcome = service.embed_passages(texts)
    # An upsert replaces every vector of a point: the sparse one is written again too.
    healed = [Point(id=p.id, payload={**p.payload, "embedding_failed": False}, vector=v,
                    sparse=sparse.encode_document(text))
              for p, text, v, failed in zip(flagged, texts, outcome.vectors, outcome.failed,
                                            strict=True)
              if not failed]
    if healed:
        store.upsert(collection, healed)
    status = DocStatus.PARTIAL if len(healed) < len(flagged) else DocStatus.OK
    state = DocState(**{**previous.__dict__, "status": status, "updated_at": utc_now(),
                        "run_id": run_id, "size": source.size, "mtime_ns": source.mtime_ns})
    states.commit([state])
    return state, outcome


def _stored_indexed_text(payload: dict, contextual: bool) -> str:
    """What a stored point was indexed as (see :meth:`PreparedDoc.indexed_text`)."""
    if not contextual:
        return payload["text"]
    return contextual_text(payload["text"], title=payload.get("title") or "",
                           heading_path=payload.get("heading_path") or "")
