"""The steps of an ingest, as module-level functions an executor can run anywhere.

Each step takes plain values (picklable: a Dask worker may run it) and, where it
needs live collaborators, an :class:`~kbsync.ingest.context.IngestContext` as its
first argument. The runner passes :data:`kbsync.ingest.executor.CONTEXT` there;
the executor puts the context of the process that runs the step in its place.

:data:`RETRIED` names the steps a transient error may be retried for: their
writes are idempotent (deterministic point ids, upsert before delete, state
last), so a retried step converges to the same index.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Sequence

from kbsync.catalog import checks, failed
from kbsync.ingest import identity, room
from kbsync.ingest.context import IngestContext, PrepareContext
from kbsync.ingest.plan import DeleteGuard, PlanCursor, RootPlan, plan_root, preflight_root
from kbsync.ingest.stages import (StageResult, chunk_stage, convert_stage, embed_stage,
                                  screen_stage)
from kbsync.ingest.classify import PlanItem
from kbsync.catalog.access import CAPTURED, mark_captured
from kbsync.models import RootSpec, SyncMode
from kbsync.text.chunk import ChunkConfig


def check_identity(ctx: IngestContext, roots: Sequence[RootSpec], namespace: str,
                   rebind: bool) -> identity.IdentityPlan:
    """Root bindings and the embedder identity, checked before anything is written."""
    return identity.check_run(roots, runtime=ctx, namespace=namespace, rebind=rebind)


def preflight(ctx: IngestContext, root: RootSpec, namespace: str, include: Sequence[str],
              exclude: Sequence[str], guard: DeleteGuard, limit: int | None = None) -> int:
    """Full mode's mass-delete guard for one root, before any root is written (``limit``:
    the run's slice size, which the root's kept listing is compared in)."""
    return preflight_root(root, runtime=ctx, namespace=namespace, include=include,
                          exclude=exclude, guard=guard, limit=limit)


def record_identity(ctx: IngestContext, plan: identity.IdentityPlan, run_id: str) -> None:
    """Record new root bindings and a new collection's embedder (never on a dry run)."""
    identity.record_run(plan, runtime=ctx, run_id=run_id)


def check_collection(ctx: IngestContext, namespace: str, create: bool) -> str | None:
    """A warning when the chunk collection was missing while records exist."""
    return checks.check_collection(ctx, namespace, create=create)


def seal_store(ctx: IngestContext) -> dict:
    """Seal the embedded store's full appendable segments of both collections; a store
    without ``seal`` (a Qdrant server optimizes on its own) seals nothing.

    Returns ``{"points": sealed, "seconds": spent}``.
    """
    total = {"points": 0, "seconds": 0.0}
    seal = getattr(ctx.store, "seal", None)
    if seal is None:
        return total
    for name in (ctx.config.collection, ctx.config.state_collection):
        report = seal(name)
        total["points"] += report["points"]
        total["seconds"] += report["seconds"]
    return total


def plan(ctx: IngestContext, root: RootSpec, namespace: str, mode: SyncMode, force: bool,
         include: Sequence[str], exclude: Sequence[str], guard: DeleteGuard,
         cursor: PlanCursor | None = None, limit: int | None = None) -> RootPlan:
    """Discover a root's next ``limit`` files after ``cursor`` and diff them against their
    stored state (writes nothing; :func:`kbsync.ingest.plan.plan_root`)."""
    return plan_root(root, runtime=ctx, namespace=namespace, mode=mode, force=force,
                     include=include, exclude=exclude, guard=guard, cursor=cursor, limit=limit)


def _timed(stage: str) -> Callable[[Callable[..., StageResult]], Callable[..., StageResult]]:
    """Add the step's wall seconds to its result's ``seconds[stage]`` (the summary's ``stage_s``)."""
    def wrap(func: Callable[..., StageResult]) -> Callable[..., StageResult]:
        @functools.wraps(func)
        def timed(*args, **kwargs) -> StageResult:
            started = time.perf_counter()
            result = func(*args, **kwargs)
            result.seconds[stage] = result.seconds.get(stage, 0.0) + time.perf_counter() - started
            return result
        return timed
    return wrap


@_timed("convert")
def convert(ctx: PrepareContext, items: Sequence[PlanItem]) -> StageResult:
    """Convert a batch of files to Markdown, screened for secrets."""
    return convert_stage(items, max_bytes=ctx.config.max_file_bytes, converter=ctx.converter(),
                         secrets=ctx.config.secrets)


def screen(ctx: PrepareContext, converted: StageResult) -> StageResult:
    """Screen texts that skipped conversion (``add_text``) for secrets, as :func:`convert`
    screens a file's Markdown (:func:`kbsync.ingest.stages.screen_stage`)."""
    return screen_stage(converted.work, policy=ctx.config.secrets)


@_timed("chunk")
def chunk(config: ChunkConfig, converted: StageResult) -> StageResult:
    """Chunk a batch of converted documents (needs only the chunk budget)."""
    return chunk_stage(converted.work, config=config)


@_timed("embed")
def embed(ctx: PrepareContext, chunked: StageResult) -> StageResult:
    """Embed a batch's chunks (cache first, then the provider in batches)."""
    return embed_stage(chunked.work, service=ctx.service, contextual=ctx.config.contextual_text)


@_timed("write")
def upsert(ctx: IngestContext, embedded: StageResult, namespace: str, run_id: str) -> StageResult:
    """Upsert, delete stale points, then commit state, document by document."""
    return room.write_batch(embedded.work, ctx, namespace=namespace, run_id=run_id)


def prepare(ctx: PrepareContext, chunk_config: ChunkConfig,
            items: Sequence[PlanItem]) -> list[StageResult]:
    """A batch's CPU work: convert -> chunk -> embed, the stage results in order.

    Opens no store: ``ctx`` needs only ``config``, ``converter()`` and ``service``
    (a :class:`kbsync.runtime.WorkerRuntime` will do), so it may run in a
    process that cannot reach the embedded store (a Dask worker process). Its
    result, with the vectors, is what :func:`write` takes.
    """
    converted = convert(ctx, items)
    chunked = chunk(chunk_config, converted)
    return [converted, chunked, embed(ctx, chunked)]


def write(ctx: IngestContext, prepared: list[StageResult], namespace: str,
          run_id: str) -> list[StageResult]:
    """Write what :func:`prepare` made (upsert, delete stale, commit state, per document),
    withdraw the stored documents its conversion refused for a secret, and keep the
    batch's failures a file's own bytes cause (:mod:`kbsync.catalog.failed`); the stage
    results of the whole batch, as :func:`batch` returns them.

    Stale remembered failures are deleted before any commit, new ones written once the
    failures are known: a crash in between costs a conversion more, never a wrong skip.
    """
    remember = [pair for result in prepared for pair in result.remember]
    again = {f.doc_id for f, _ in remember}
    stale = [d for result in prepared for d in result.forget if d not in again]
    if stale:
        failed.forget(ctx.states, namespace, stale)
    withdrawn = [doc_id for result in prepared for doc_id in result.withdraw]
    if withdrawn:
        room.withdraw_batch(withdrawn, ctx, namespace=namespace)
    written = upsert(ctx, prepared[-1], namespace, run_id)
    if remember:
        key = failed.failure_key(ctx.fingerprint, ctx.ocr_key, ctx.config.max_file_bytes)
        failed.remember(ctx.states, namespace, (failed.RememberedFailure(
            f, s.root, s.size, s.mtime_ns, key) for f, s in remember))
    return [*prepared, written]


def batch(ctx: IngestContext, chunk_config: ChunkConfig, items: Sequence[PlanItem],
          namespace: str, run_id: str) -> list[StageResult]:
    """One batch through :data:`BATCH_STAGES` (convert -> chunk -> embed -> upsert):
    :func:`prepare`, then :func:`write`, in one step.

    The unit an executor schedules: a Prefect task run per stage cost more than the
    stage itself on small batches (four chained task runs per batch made the flow 2-3x
    the plain loop; see tests/bench/README.md), so the stages of a batch run in turn
    in one step, and each stage's result (failures, counters) is kept. An executor
    whose workers cannot open the store runs the two halves apart (see
    :data:`STORE_FREE`).
    """
    return write(ctx, prepare(ctx, chunk_config, items), namespace, run_id)


def heal(ctx: IngestContext, items: Sequence[PlanItem], namespace: str,
         run_id: str) -> StageResult:
    """Re-embed the zero-vector chunks of unchanged partial documents."""
    return room.heal_batch(items, ctx, namespace=namespace, run_id=run_id)


def finish_root(ctx: IngestContext, rp: RootPlan, namespace: str) -> tuple[int, int]:
    """Refresh unchanged files' stat records and permissions; delete the documents the plan
    deletes (its last slice's ``to_delete``); after the root's last slice of a run that
    looked at all of it, record that its documents carry their permissions
    (:func:`kbsync.catalog.access.mark_captured`), and keep its chunk total for the next
    run's check (:meth:`kbsync.catalog.state.StateStore.keep_chunk_total`), with the
    root's listing when the run found it clean (:mod:`kbsync.ingest.listing`); forget the
    remembered failures of files the walk no longer sees (:mod:`kbsync.catalog.failed`). Returns
    ``(deleted, permissions_updated)``."""
    moved = room.finish_unchanged(rp, ctx, namespace)
    deleted = room.delete_missing(rp, ctx, namespace)
    if rp.forget_failures:  # their files are gone from the walk (kbsync.catalog.failed)
        failed.forget(ctx.states, namespace, rp.forget_failures)
    if rp.cursor is None and not rp.filtered and not _captured(ctx, namespace, rp.root.name):
        mark_captured(ctx.states, namespace, rp.root.name)  # once: a no-op writes nothing
    if rp.cursor is None:  # after the root's last commit; a no-op finds it kept
        ctx.states.keep_chunk_total(namespace, rp.root.name, rp.listing)
    return deleted, moved


def _captured(ctx: IngestContext, namespace: str, root: str) -> bool:
    """Whether ``root`` of ``namespace`` is marked captured already (one metadata read)."""
    return any(r.get("captured_root") == root
               for r in ctx.states.read_meta(CAPTURED, captured_namespace=namespace))


BATCH_STAGES = (convert, chunk, embed, upsert)
"""The stages every batch goes through, in order."""


class Retry(Enum):
    """How a step's transient errors are retried (the idempotent writes make it safe)."""

    NONE = "none"
    STORE = "store"  # store unavailable, lock held: 3 tries 2 s apart
    ENDPOINT = "endpoint"  # an embedding endpoint recovering: 2 tries 5 s apart


@dataclass(frozen=True)
class StepSpec:
    """What an executor needs to know of a step, beside its function.

    ``store_free``: the step opens no store, so it may run in a process that cannot reach
    the embedded store. ``split``: where the workers cannot reach the store, the step runs
    as these two instead, the first (store-free) on a worker, the second here, on its value.
    """

    retry: Retry = Retry.NONE
    store_free: bool = False
    split: tuple[Callable[..., Any], Callable[..., Any]] | None = None


STEPS: dict[Callable[..., Any], StepSpec] = {
    check_identity: StepSpec(),
    preflight: StepSpec(),
    record_identity: StepSpec(Retry.STORE),
    check_collection: StepSpec(Retry.STORE),
    seal_store: StepSpec(),
    plan: StepSpec(),
    batch: StepSpec(Retry.STORE, split=(prepare, write)),
    prepare: StepSpec(Retry.ENDPOINT, store_free=True),
    write: StepSpec(Retry.STORE),
    embed: StepSpec(Retry.ENDPOINT),
    upsert: StepSpec(Retry.STORE),
    heal: StepSpec(Retry.ENDPOINT),
    finish_root: StepSpec(Retry.STORE),
}
"""The step table: every step an executor may be handed, and how it runs. The retry and
placement registries below, the Prefect tasks' retries (:mod:`tasks.ingest_tasks`) and the
Prefect executor's split of a batch (:mod:`flows.executor`) are all read from it."""

RETRIED = frozenset(step for step, spec in STEPS.items() if spec.retry is not Retry.NONE)
"""Steps a transient error (store unavailable, lock held, 5xx) may be retried for."""

STORE_FREE = frozenset(step for step, spec in STEPS.items() if spec.store_free)
"""Steps that open no store: the only ones an executor may hand to a process that cannot
reach the embedded store (it runs every other step in the process holding the store)."""
