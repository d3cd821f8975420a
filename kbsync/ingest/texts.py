"""A document given as text (``kbsync.api.add_text``), through the runner's steps.

The same checks in the same order as a file ingest (:mod:`kbsync.ingest.runner`):
under the write lock, the embedder identity, its record, the collection check, and
that no root owns the doc_id (:func:`check_owner`);
then the plan rule of :func:`kbsync.ingest.classify.plan_files`, and the chunk,
embed and upsert steps a batch of files goes through. Only conversion is
skipped: the text is the Markdown, screened for secrets as a file's is
(:func:`kbsync.ingest.steps.screen`). Unlike a file, whose failure is reported and
the run goes on, the one document's failure is raised.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

from kbsync import errors
from kbsync.errors import EmbeddingOutage, EmptyDocument, KbsyncError, RootConflict
from kbsync.ingest import steps
from kbsync.catalog import identity
from kbsync.ingest.context import IngestContext
from kbsync.ingest.executor import CONTEXT, Executor
from kbsync.ingest.stages import DocWork, StageResult
from kbsync.ingest.write import update_permissions
from kbsync.ingest.classify import PlanItem, classify
from kbsync.models import DocState, Document, Failure, PlanAction, SourceFile, name_key


@dataclass(frozen=True)
class TextRequest:
    """One text to store as document ``source.doc_id`` of ``namespace``."""

    source: SourceFile  # content_hash set; ``path`` is the doc_id (nothing is read)
    text: str
    title: str
    namespace: str
    run_id: str


@dataclass
class TextOutcome:
    """What :func:`ingest_text` did: the plan's action, the state now recorded, counters."""

    action: PlanAction
    state: DocState
    counters: Counter = field(default_factory=Counter)


def plan_text(ctx: IngestContext, source: SourceFile, namespace: str) -> PlanItem:
    """The plan rule (:func:`kbsync.ingest.classify.classify`) for a text whose hash is known."""
    previous = ctx.states.get(namespace, source.doc_id)
    same_settings = previous is not None and previous.fingerprint == ctx.fingerprint
    return PlanItem(classify(previous, source.content_hash, same_settings=same_settings), source,
                    previous)


def refresh_access(ctx: IngestContext, source: SourceFile, previous: DocState,
                   namespace: str) -> DocState:
    """An unchanged text's state, its points given the text's profile first when its record
    names another (or none: written before permissions were captured)."""
    if source.access is None or source.access == previous.access:
        return previous
    update_permissions([source], store=ctx.store, states=ctx.states, collection=ctx.collection,
                       namespace=namespace)
    state = replace(previous, access=source.access)
    ctx.states.commit([state])
    return state


def check_owner(ctx: IngestContext, source: SourceFile, namespace: str) -> None:
    """Refuse a text whose doc_id a root owns: the file's document, or one under a bound
    root NAME (``docs/...`` while ``docs`` is bound, in any case or Unicode width:
    :func:`kbsync.models.name_key`); the text would replace the file's
    document, and the next ingest of the root would silently replace the text.

    Raises:
        RootConflict: the doc_id belongs to a root.
    """
    previous = ctx.states.get(namespace, source.doc_id)
    owner = previous.root if previous is not None and previous.root != source.root else None
    head, sep, _ = source.doc_id.partition("/")
    if owner is None and sep:  # ``Docs/...`` or fullwidth ``ｄｏｃｓ/...`` pass for ``docs/...``
        owner = next((name for name in sorted(identity.bound_roots(ctx.states, namespace))
                      if name_key(name) == name_key(head)), None)
    if owner is not None:
        raise RootConflict(f"doc_id {source.doc_id} of namespace {namespace} belongs to root "
                           f"{owner} (its files' documents); give the text a doc_id outside "
                           f"{owner}/, e.g. notes/{source.doc_id}")


def recorded_state(ctx: IngestContext, namespace: str, doc_id: str) -> DocState | None:
    """The state record of ``doc_id`` (after a write: the one just committed)."""
    return ctx.states.get(namespace, doc_id)


def ingest_text(request: TextRequest, executor: Executor) -> TextOutcome:
    """Store one text under the write lock (see the module docstring).

    Raises:
        EmbedderMismatch: the collection was built with another embedder.
        EmptyDocument: the text chunks to nothing.
        SecretDetected: the text holds a secret and ``KBSYNC_SECRETS`` is ``refuse``
            (the previous version stays).
        EmbeddingOutage: every chunk failed to embed (the previous version stays).
        KbsyncError: the write failed (the previous version stays), or a run-level
            condition (lock held, store unavailable, disk full).
    """
    ns, run_id = request.namespace, request.run_id
    with executor.write_lock(ns):
        bound = executor.call(steps.check_identity, CONTEXT, (), ns, False, label="check-identity")
        executor.call(steps.record_identity, CONTEXT, bound, run_id, label="record-identity")
        executor.call(steps.check_collection, CONTEXT, ns, True, label="check-collection")
        executor.call(check_owner, CONTEXT, request.source, ns, label="check-owner")
        item = executor.call(plan_text, CONTEXT, request.source, ns, label="plan")
        if item.action is PlanAction.UNCHANGED:
            assert item.previous is not None
            refreshed = executor.call(refresh_access, CONTEXT, request.source, item.previous,
                                      ns, label="permissions")
            return TextOutcome(item.action, refreshed)
        if item.action is PlanAction.HEAL:
            counters = _raise_failures(executor.call(steps.heal, CONTEXT, [item], ns, run_id,
                                                     label="heal")).counters
        else:
            counters = _write(request, item, executor)
        state = executor.call(recorded_state, CONTEXT, ns, request.source.doc_id, label="state")
    assert state is not None
    return TextOutcome(item.action, state, counters)


def _write(request: TextRequest, item: PlanItem, executor: Executor) -> Counter:
    """chunk -> embed -> upsert for the one document; its counters."""
    document = Document(doc_id=request.source.doc_id, path=request.source.doc_id,
                        markdown=request.text, title=request.title, source_type="text",
                        converter="api")
    converted = StageResult(work=[DocWork(item=item, document=document, title=request.title,
                                          source_type="text")])
    screened = _raise_failures(executor.call(steps.screen, CONTEXT, converted, label="screen"))
    chunked = executor.call(steps.chunk, executor.chunk_config, screened, label="chunk")
    if chunked.failures:
        raise EmptyDocument(chunked.failures[0].message)
    embedded = executor.call(steps.embed, CONTEXT, chunked, label="embed")
    if embedded.failures:
        raise EmbeddingOutage(embedded.failures[0].message)
    written = _raise_failures(executor.call(steps.upsert, CONTEXT, embedded, request.namespace,
                                            request.run_id, label="upsert"))
    return embedded.counters + written.counters


def _raise_failures(result: StageResult) -> StageResult:
    if result.failures:
        raise _error_of(result.failures[0])
    return result


def _error_of(failure: Failure) -> KbsyncError:
    """The error a document's failure record names, raised for the one document."""
    kind = getattr(errors, failure.error, None)
    if isinstance(kind, type) and issubclass(kind, KbsyncError):
        return kind(failure.message)
    return KbsyncError(failure.message)
