"""The chunk payload schema and point ids: what one stored point of a collection is.

Invariants: a point's id is uuid5 over (namespace, doc_id, chunk index, text hash), so a
re-run writes the same ids and a document is replaced idempotently; every payload string
is valid UTF-8; :data:`PAYLOAD_VERSION` enters the settings fingerprint, so raising it
rewrites every document once. What a point is indexed as (:meth:`PreparedDoc.indexed_text`)
and what a stored point was indexed as (:func:`stored_indexed_text`) are kept side by side:
a healed point's vectors must equal a fresh write's. The write order lives in
:mod:`kbsync.ingest.write`; :mod:`kbsync.maintenance.verify` recomputes :func:`point_id`.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field

from kbsync.models import Chunk, DocStatus, SourceFile
from kbsync.store.base import Point
from kbsync.text.context import contextual_text
from kbsync.text.sparse import SparseEncoder

POINT_NAMESPACE = uuid.UUID("1b6f2a8e-0d4c-4f3b-9a57-7c2e5d9e8a10")
# root: the per-root store check counts by it; root, folders, source_type: query-time filters;
# access: every reader's search filters on it (kbsync.catalog.access)
CHUNK_INDEXES = ("namespace", "doc_id", "root", "folders", "source_type", "access")
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
    collection's own ``sparse`` encoder (:func:`kbsync.catalog.identity.sparse_encoder`;
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
            **({"access": doc.source.access} if doc.source.access is not None else {}),
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


def stored_indexed_text(payload: dict, contextual: bool) -> str:
    """What a stored point was indexed as (see :meth:`PreparedDoc.indexed_text`)."""
    if not contextual:
        return payload["text"]
    return contextual_text(payload["text"], title=payload.get("title") or "",
                           heading_path=payload.get("heading_path") or "")
