"""Batch-level stage functions: convert -> chunk -> embed -> write.

Each function takes a batch of documents, never raises for one bad file, and
returns a :class:`StageResult` with the documents that go on, the failures, and
counters. ``tasks/`` wraps each one in a Prefect task; :func:`run_plain` chains
them in a plain loop (used by tests and the benchmark that measures the
orchestration overhead).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Sequence

from kbsync.chunk import ChunkConfig, chunk_document
from kbsync.convert import convert
from kbsync.errors import EmptyDocument, KbsyncError
from kbsync.models import Chunk, Document, DocStatus, Failure, PlanAction, SourceFile
from kbsync.state import PlanItem
from kbsync.sync import PreparedDoc, heal_document, write_document

log = logging.getLogger(__name__)


@dataclass
class DocWork:
    """One document on its way through the stages."""

    item: PlanItem
    document: Document | None = None  # dropped once chunked, to free the Markdown
    title: str = ""
    source_type: str = ""
    chunks: list[Chunk] = field(default_factory=list)
    prepared: PreparedDoc | None = None

    @property
    def source(self) -> SourceFile:
        """The file being processed."""
        assert self.item.file is not None
        return self.item.file


class StageResult:
    """What a stage hands on: surviving documents, failures, counters.

    Deliberately not a dataclass: Prefect walks dataclass task inputs field by
    field looking for futures, which cost ~0.25 s per batch once the vectors are
    in it (measured); an opaque object is handed over as is.
    """

    __slots__ = ("work", "failures", "counters")

    def __init__(self, work: list[DocWork] | None = None,
                 failures: list[Failure] | None = None, counters: Counter | None = None) -> None:
        self.work: list[DocWork] = work if work is not None else []
        self.failures: list[Failure] = failures if failures is not None else []
        self.counters: Counter = counters if counters is not None else Counter()

    def __repr__(self) -> str:
        return (f"StageResult({len(self.work)} documents, {len(self.failures)} failures, "
                f"{dict(self.counters)})")


def failure_of(source: SourceFile, exc: BaseException) -> Failure:
    """A one-line failure record for ``source``; the error name is the exception type."""
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return Failure(doc_id=source.doc_id, path=str(source.path), error=type(exc).__name__,
                   message=message)


def convert_stage(items: Sequence[PlanItem], *, max_bytes: int,
                  converter: Callable[..., Document] = convert) -> StageResult:
    """Convert each file to Markdown; every error becomes a one-line failure.

    Discovery already left out unsupported extensions, so an ``UnsupportedFormat``
    here (content that does not match its extension) is a failure, not ignored.
    """
    result = StageResult()
    for item in items:
        work = DocWork(item=item)
        try:
            work.document = converter(work.source.path, doc_id=work.source.doc_id,
                                      max_bytes=max_bytes)
        except Exception as exc:  # noqa: BLE001 - one bad file must never stop the batch
            if not isinstance(exc, KbsyncError):
                log.exception("converter crashed on %s", work.source.doc_id)
            result.failures.append(failure_of(work.source, exc))
            continue
        work.title, work.source_type = work.document.title, work.document.source_type
        result.counters["converter_warnings"] += len(work.document.warnings)
        result.work.append(work)
    return result


def chunk_stage(works: Sequence[DocWork], *, config: ChunkConfig) -> StageResult:
    """Chunk each document; a document with no chunk left is an ``EmptyDocument``."""
    result = StageResult()
    for work in works:
        assert work.document is not None
        chunked = chunk_document(work.document, config)
        result.counters["chunks_raw"] += chunked.raw
        result.counters["chunks_kept"] += chunked.kept
        work.document = None
        if not chunked.chunks:
            result.failures.append(failure_of(work.source, EmptyDocument(
                f"{work.source.path}: no text left after chunking")))
            continue
        work.chunks = chunked.chunks
        result.work.append(work)
    return result


def embed_stage(works: Sequence[DocWork], *, service) -> StageResult:
    """Embed every chunk of the batch in one call (the service batches by 64).

    A document whose every chunk fell back to the zero vector is reported as
    failed and not written, so its previous version stays; one with some
    fallbacks is written with status ``partial`` and healed by the next run.
    """
    result = StageResult()
    texts = [c.text for w in works for c in w.chunks]
    if not texts:
        return result
    outcome = service.embed_passages(texts)
    result.counters["embeddings_computed"] += outcome.computed
    result.counters["embeddings_cached"] += outcome.cached
    result.counters["embeddings_truncated"] += outcome.truncated
    start = 0
    for work in works:
        end = start + len(work.chunks)
        vectors, failed = outcome.vectors[start:end], outcome.failed[start:end]
        start = end
        if all(failed):
            result.counters["embeddings_failed"] += len(failed)
            result.failures.append(Failure(
                work.source.doc_id, str(work.source.path), "EmbeddingFailed",
                f"{work.source.doc_id}: embedding failed for all {len(failed)} chunks after "
                "retries; previous version kept"))
            continue
        result.counters["embeddings_failed"] += sum(failed)
        work.prepared = PreparedDoc(source=work.source, chunks=work.chunks, vectors=vectors,
                                    failed=failed, title=work.title,
                                    source_type=work.source_type)
        result.work.append(work)
    return result


def merge(results: Sequence[StageResult]) -> StageResult:
    """Add up failures and counters of several stage results (work is concatenated)."""
    total = StageResult()
    for part in results:
        total.work.extend(part.work)
        total.failures.extend(part.failures)
        total.counters.update(part.counters)
    return total


def write_stage(works: Sequence[DocWork], *, runtime, namespace: str, run_id: str) -> StageResult:
    """Write each prepared document in the crash-safe order; count added and updated."""
    result = StageResult()
    for work in works:
        assert work.prepared is not None
        try:
            state = write_document(work.prepared, store=runtime.store, states=runtime.states,
                                   collection=runtime.collection, namespace=namespace,
                                   fingerprint=runtime.fingerprint, run_id=run_id)
        except KbsyncError as exc:
            result.failures.append(failure_of(work.source, exc))
            continue
        result.counters["added" if work.item.action is PlanAction.NEW else "updated"] += 1
        result.counters["partial"] += state.status is DocStatus.PARTIAL
        work.prepared = None
        work.chunks = []
    return result


def heal_stage(items: Sequence[PlanItem], *, runtime, namespace: str,
               run_id: str) -> StageResult:
    """Re-embed the flagged chunks of unchanged ``partial`` documents (counted as updated)."""
    result = StageResult()
    for item in items:
        source = item.file
        assert source is not None and item.previous is not None
        try:
            state, outcome = heal_document(
                source, item.previous, store=runtime.store, states=runtime.states,
                service=runtime.service, collection=runtime.collection, namespace=namespace,
                run_id=run_id)
        except KbsyncError as exc:
            result.failures.append(failure_of(source, exc))
            continue
        result.counters["updated"] += 1
        result.counters["embeddings_computed"] += outcome.computed
        result.counters["embeddings_cached"] += outcome.cached
        result.counters["embeddings_failed"] += outcome.failed_count
        result.counters["partial"] += state.status is DocStatus.PARTIAL
    return result
