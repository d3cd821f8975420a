"""Batch-level stage functions: convert -> chunk -> embed -> write.

Each function takes a batch of documents, never raises for one bad file, and
returns a :class:`StageResult` with the documents that go on, the failures, and
counters. An unexpected exception (not a :class:`KbsyncError`: a kbsync bug, a
vendor ``TypeError``) becomes the failure of the documents it hit, as an
``InternalError`` with a one-line message (traceback at debug level); only the
conditions of the whole run in :data:`RUN_LEVEL_ERRORS` propagate.

``tasks/`` wraps each one in a Prefect task; :func:`run_plain` chains them in a
plain loop (used by tests and the benchmark that measures the orchestration
overhead).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

from kbsync.text.chunk import ChunkConfig, chunk_document
from kbsync.text.context import contextual_text
from kbsync.text.secrets import SecretPolicy, screen
from kbsync.convert import convert
from kbsync.embed.base import Embedder
from kbsync.errors import (DiskFull, EmbeddingOutage, EmptyDocument, ErrorCode, InternalError,
                           KbsyncError, LockHeld, OrchestratorUnavailable, SecretDetected,
                           StoreUnavailable)
from kbsync.models import Chunk, Document, DocStatus, Failure, PlanAction, SourceFile
from kbsync.ingest.context import IngestContext
from kbsync.ingest.summary import Count
from kbsync.catalog.failed import is_remembered
from kbsync.catalog.state import document_fingerprint
from kbsync.ingest.classify import PlanItem
from kbsync.catalog.schema import PreparedDoc
from kbsync.ingest.write import heal_document, write_document

log = logging.getLogger(__name__)

RUN_LEVEL_ERRORS: tuple[type[KbsyncError], ...] = (
    StoreUnavailable, DiskFull, LockHeld, EmbeddingOutage, OrchestratorUnavailable)
"""Conditions of the whole run: no stage turns them into a document's failure."""


@dataclass
class DocWork:
    """One document on its way through the stages."""

    item: PlanItem
    document: Document | None = None  # dropped once chunked, to free the Markdown
    title: str = ""
    source_type: str = ""
    chunks: list[Chunk] = field(default_factory=list)
    prepared: PreparedDoc | None = None
    ocr_pages: dict[int, float] = field(default_factory=dict)  # kept once the Markdown is dropped
    scanned_pages: int = 0

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

    __slots__ = ("work", "failures", "counters", "seconds", "withdraw", "remember", "forget")

    def __init__(self, work: list[DocWork] | None = None,
                 failures: list[Failure] | None = None, counters: Counter | None = None,
                 seconds: dict[str, float] | None = None) -> None:
        self.work: list[DocWork] = work if work is not None else []
        self.failures: list[Failure] = failures if failures is not None else []
        self.counters: Counter[Count] = counters if counters is not None else Counter()
        # wall seconds per stage name (kbsync.ingest.steps times them): the summary's stage_s
        self.seconds: dict[str, float] = seconds if seconds is not None else {}
        # doc_ids whose stored version the write step removes: a file that now holds a
        # secret (SecretDetected), whose older version may hold it too
        self.withdraw: list[str] = []
        # failures the write step remembers (a code of kbsync.catalog.failed.REMEMBERED,
        # with the file it holds for), and doc_ids whose remembered failure it forgets
        self.remember: list[tuple[Failure, SourceFile]] = []
        self.forget: list[str] = []

    def __repr__(self) -> str:
        return (f"StageResult({len(self.work)} documents, {len(self.failures)} failures, "
                f"{ {str(k): v for k, v in self.counters.items()} })")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0].strip() if text else ""


def failure_of(source: SourceFile, exc: BaseException, stage: str = "") -> Failure:
    """A one-line failure record for ``source``.

    A :class:`KbsyncError` is reported under its own kind; any other exception
    is an ``InternalError`` whose message names the exception type and the
    stage: ``InternalError: ValueError: <first line> (while embedding)``.
    """
    if isinstance(exc, KbsyncError):
        return Failure(doc_id=source.doc_id, path=source.display, error=exc.kind,
                       message=_first_line(exc) or exc.kind)
    detail = ": ".join(filter(None, (type(exc).__name__, _first_line(exc))))
    where = f" (while {stage})" if stage else ""
    return Failure(doc_id=source.doc_id, path=source.display, error=ErrorCode.InternalError,
                   message=f"{InternalError.__name__}: {detail}{where}")


def contain(result: StageResult, source: SourceFile, exc: Exception, stage: str) -> None:
    """Record an unexpected exception as ``source``'s failure: one line, traceback at debug.

    Never a silent swallow: the failure is counted in ``failures`` and logged.
    """
    failure = failure_of(source, exc, stage)
    log.warning("%s: %s", source.doc_id, failure.message)
    log.debug("traceback of the failure of %s while %s", source.doc_id, stage, exc_info=exc)
    result.failures.append(failure)


def screen_document(document: Document, *, name: str, policy: SecretPolicy) -> Document:
    """``document`` as it may be indexed: its text and title screened for secrets
    (:func:`kbsync.text.secrets.screen`), the one check every indexed text goes through.

    Raises:
        SecretDetected: a secret, under ``SecretPolicy.REFUSE``.
    """
    markdown, offsets = screen(document.markdown, name=name, policy=policy,
                               offsets=document.page_offsets)
    title, _ = screen(document.title, name=f"{name} (title)", policy=policy)
    if markdown is document.markdown and title is document.title:
        return document
    return replace(document, markdown=markdown, title=title, page_offsets=offsets)


def screen_stage(works: Sequence[DocWork], *, policy: SecretPolicy) -> StageResult:
    """Screen documents given as text (``add_text``: no conversion) as :func:`convert_stage`
    screens a file's Markdown; a secret under REFUSE is the document's failure."""
    result = StageResult()
    for work in works:
        assert work.document is not None
        try:
            work.document = screen_document(work.document, name=work.source.display,
                                            policy=policy)
        except KbsyncError as exc:
            result.failures.append(failure_of(work.source, exc))
            continue
        work.title = work.document.title
        result.work.append(work)
    return result


def _refuse_secret(result: StageResult, work: DocWork, exc: SecretDetected) -> None:
    """A file that holds a secret fails, and its stored version, if any, is withdrawn.

    The exception to "a failed file keeps its previous version": that version was indexed
    before the file was screened (a store older than the detector, or an older table) or
    under another policy, and may hold the same secret; a file refused now must not stay
    searchable by its older text. The failure says so.
    """
    failure = failure_of(work.source, exc)
    _keep(result, work.source, failure)  # as a later run, the stored version gone, reports it
    if work.item.previous is not None:
        result.withdraw.append(work.source.doc_id)
        failure = replace(failure, message=f"{failure.message}; its indexed version is removed")
    log.warning("%s", failure.message)
    result.failures.append(failure)


def _keep(result: StageResult, source: SourceFile, failure: Failure) -> Failure:
    """``failure``, handed to the write step to remember when its code is one the file's
    own bytes cause (:data:`kbsync.catalog.failed.REMEMBERED`)."""
    if is_remembered(failure.error):
        result.remember.append((failure, source))
    return failure


def convert_stage(items: Sequence[PlanItem], *, max_bytes: int,
                  converter: Callable[..., Document] = convert,
                  secrets: SecretPolicy = SecretPolicy.REFUSE) -> StageResult:
    """Convert each file to Markdown and screen it for secrets (:func:`screen_document`);
    every error becomes a one-line failure.

    Discovery already left out unsupported extensions, so an ``UnsupportedFormat``
    here (content that does not match its extension) is a failure, not ignored.
    """
    result = StageResult()
    for item in items:
        work = DocWork(item=item)
        if item.forget_failure:
            result.forget.append(item.doc_id)
        try:
            # within: the read itself checks the file is still inside its root
            document = converter(work.source.path, doc_id=work.source.doc_id,
                                 max_bytes=max_bytes, within=work.source.root_path)
            work.document = screen_document(document, name=work.source.display, policy=secrets)
        except RUN_LEVEL_ERRORS:
            raise
        except SecretDetected as exc:
            _refuse_secret(result, work, exc)
            continue
        except KbsyncError as exc:
            result.failures.append(_keep(result, work.source, failure_of(work.source, exc)))
            continue
        except Exception as exc:  # noqa: BLE001 - one bad file must never stop the batch
            contain(result, work.source, exc, "converting")
            continue
        work.title, work.source_type = work.document.title, work.document.source_type
        work.ocr_pages, work.scanned_pages = work.document.ocr_pages, work.document.scanned_pages
        result.counters[Count.CONVERTER_WARNINGS] += len(work.document.warnings)
        result.work.append(work)
    return result


def chunk_stage(works: Sequence[DocWork], *, config: ChunkConfig) -> StageResult:
    """Chunk each document; a document with no chunk left is an ``EmptyDocument``."""
    result = StageResult()
    for work in works:
        assert work.document is not None
        try:
            chunked = chunk_document(work.document, config)
        except RUN_LEVEL_ERRORS:
            raise
        except Exception as exc:  # noqa: BLE001 - contained to this document
            work.document = None
            contain(result, work.source, exc, "chunking")
            continue
        result.counters[Count.CHUNKS_RAW] += chunked.raw
        result.counters[Count.CHUNKS_KEPT] += chunked.kept
        work.document = None
        if not chunked.chunks:
            result.failures.append(_keep(result, work.source, failure_of(
                work.source, EmptyDocument(f"{work.source.display}: no text left after chunking"))))
            continue
        work.chunks = chunked.chunks
        result.work.append(work)
    return result


def embed_stage(works: Sequence[DocWork], *, service: Embedder,
                contextual: bool = False) -> StageResult:
    """Embed every chunk of the batch in one call (the service batches by 64).

    A document whose every chunk fell back to the zero vector is reported as
    failed and not written, so its previous version stays; one with some
    fallbacks is written with status ``partial`` and healed by the next run.

    An unexpected exception from the batch call is retried document by document
    (the cache keeps what the batch call already computed), so only the
    documents that fail again become ``InternalError`` failures. Kbsync errors
    (a refused key, a wrong model) still propagate: they are the run's.

    With ``contextual`` each chunk is embedded with its title and heading path in
    front (:mod:`kbsync.text.context`); the chunk's stored text stays its own.
    """
    result = StageResult()
    texts = [_indexed(w, c, contextual) for w in works for c in w.chunks]
    if not texts:
        return result
    try:
        outcome = service.embed_passages(texts)
    except KbsyncError:
        raise
    except Exception as exc:  # noqa: BLE001 - narrowed to the documents below
        log.warning("embedding a batch of %d documents failed (%s: %s); embedding them one "
                    "by one", len(works), type(exc).__name__, _first_line(exc))
        log.debug("traceback of the batch embedding failure", exc_info=exc)
        return _embed_each(works, service=service, contextual=contextual)
    _assign(result, works, outcome, contextual)
    return result


def _indexed(work: DocWork, chunk: Chunk, contextual: bool) -> str:
    """What ``chunk`` is embedded as (the same string ``build_points`` BM25-encodes)."""
    return contextual_text(chunk.text, title=work.title,
                           heading_path=chunk.heading_path) if contextual else chunk.text


def _embed_each(works: Sequence[DocWork], *, service: Embedder,
                contextual: bool) -> StageResult:
    """The per-document fallback of :func:`embed_stage`."""
    result = StageResult()
    for work in works:
        try:
            outcome = service.embed_passages([_indexed(work, c, contextual)
                                              for c in work.chunks])
        except KbsyncError:
            raise
        except Exception as exc:  # noqa: BLE001 - contained to this document
            contain(result, work.source, exc, "embedding")
            continue
        _assign(result, [work], outcome, contextual)
    return result


def _assign(result: StageResult, works: Sequence[DocWork], outcome, contextual: bool) -> None:
    """Hand each document its slice of ``outcome``, in order; count and fail as documented."""
    result.counters[Count.EMBEDDINGS_COMPUTED] += outcome.computed
    result.counters[Count.EMBEDDINGS_CACHED] += outcome.cached
    result.counters[Count.EMBEDDINGS_TRUNCATED] += outcome.truncated
    result.counters[Count.EMBEDDING_BISECT_REQUESTS] += outcome.bisect_requests
    start = 0
    for work in works:
        end = start + len(work.chunks)
        vectors, failed = outcome.vectors[start:end], outcome.failed[start:end]
        start = end
        if all(failed):
            result.counters[Count.EMBEDDINGS_FAILED] += len(failed)
            # Others of the same call embedded: the endpoint failed on these texts alone.
            why = ("the endpoint failed on these texts while it embedded others of the batch "
                   "(an input it cannot take)" if outcome.computed
                   else "after retries")
            result.failures.append(Failure(
                work.source.doc_id, work.source.display, ErrorCode.EmbeddingFailed,
                f"{work.source.doc_id}: embedding failed for all {len(failed)} chunks {why}; "
                "previous version kept"))
            continue
        result.counters[Count.EMBEDDINGS_FAILED] += sum(failed)
        work.prepared = PreparedDoc(source=work.source, chunks=work.chunks, vectors=vectors,
                                    failed=failed, title=work.title,
                                    source_type=work.source_type, contextual=contextual,
                                    ocr_pages=work.ocr_pages, scanned_pages=work.scanned_pages)
        result.work.append(work)


def merge(results: Sequence[StageResult]) -> StageResult:
    """Add up failures and counters of several stage results (work is concatenated)."""
    total = StageResult()
    for part in results:
        total.work.extend(part.work)
        total.failures.extend(part.failures)
        total.counters.update(part.counters)
    return total


def write_stage(works: Sequence[DocWork], *, runtime: IngestContext, namespace: str,
                run_id: str) -> StageResult:
    """Write each prepared document in the crash-safe order; count added and updated."""
    result = StageResult()
    for work in works:
        assert work.prepared is not None
        try:
            state = write_document(work.prepared, store=runtime.store, states=runtime.states,
                                   collection=runtime.collection, namespace=namespace,
                                   fingerprint=document_fingerprint(
                                       runtime.fingerprint, runtime.ocr_key,
                                       work.prepared.scanned_pages),
                                   run_id=run_id, sparse=runtime.sparse)
        except RUN_LEVEL_ERRORS:
            raise
        except KbsyncError as exc:
            result.failures.append(failure_of(work.source, exc))
            continue
        except Exception as exc:  # noqa: BLE001 - contained to this document
            contain(result, work.source, exc, "writing")
            continue
        result.counters[Count.ADDED if work.item.action is PlanAction.NEW else Count.UPDATED] += 1
        result.counters[Count.PARTIAL] += state.status is DocStatus.PARTIAL
        work.prepared = None
        work.chunks = []
    return result


def heal_stage(items: Sequence[PlanItem], *, runtime: IngestContext, namespace: str,
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
                run_id=run_id, sparse=runtime.sparse, contextual=runtime.config.contextual_text)
        except RUN_LEVEL_ERRORS:
            raise
        except KbsyncError as exc:
            result.failures.append(failure_of(source, exc))
            continue
        except Exception as exc:  # noqa: BLE001 - contained to this document
            contain(result, source, exc, "healing")
            continue
        result.counters[Count.UPDATED] += 1
        result.counters[Count.EMBEDDINGS_COMPUTED] += outcome.computed
        result.counters[Count.EMBEDDINGS_CACHED] += outcome.cached
        result.counters[Count.EMBEDDINGS_FAILED] += outcome.failed_count
        result.counters[Count.EMBEDDING_BISECT_REQUESTS] += outcome.bisect_requests
        result.counters[Count.PARTIAL] += state.status is DocStatus.PARTIAL
    return result
