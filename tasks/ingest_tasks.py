"""The ingest stages as Prefect tasks, one task run per batch of files.

Each task is a thin wrapper over a :mod:`kbsync.ingest.stages` function; per-file
errors, unexpected exceptions included (as ``InternalError``), are already
captured there, so a task fails only for a run-level problem
(``pipeline.RUN_LEVEL_ERRORS``). Transient errors (store unavailable, lock held)
are retried; writes are idempotent, so a retried batch converges to the same
points.
"""

from __future__ import annotations

from typing import Sequence

from prefect import task
from prefect.cache_policies import NONE

from kbsync.ingest import plan as ingest_plan, room

from kbsync.ingest import identity

from kbsync.ingest import stages as pipeline

from kbsync.ingest import verify
from kbsync.errors import TransientError
from kbsync.ingest.plan import DeleteGuard, RootPlan
from kbsync.models import RootSpec, SyncMode
from kbsync.settings import Settings
from kbsync.ingest.state import PlanItem
from tasks.resources import runtime_for


def _transient(task, task_run, state) -> bool:
    """Retry only when retrying can help."""
    try:
        state.result()
    except TransientError:
        return True
    except Exception:  # noqa: BLE001 - anything else is permanent for this batch
        return False
    return False


# No cache (inputs are live batches, not hashable keys) and no result persistence (results
# are handed on in memory). No timeout_seconds either: tasks run in worker threads, where
# Prefect cannot interrupt a blocking call; per-file time limits belong to the converter.
COMMON = dict(cache_policy=NONE, persist_result=False)


@task(name="plan", tags=["kbsync", "plan"], **COMMON)
def plan_root(root: RootSpec, settings: Settings, *, namespace: str, mode: SyncMode,
              force: bool, include: Sequence[str], exclude: Sequence[str],
              guard: DeleteGuard) -> RootPlan:
    """Discover a root and diff it against the stored state (writes nothing); documents
    whose points no longer match their record are planned for repair."""
    runtime = runtime_for(settings)
    runtime.ensure_collection()
    return ingest_plan.plan_root(root, runtime=runtime, namespace=namespace, mode=mode, force=force,
                            include=include, exclude=exclude, guard=guard)


@task(name="convert", tags=["kbsync", "convert"], **COMMON)
def convert_batch(items: list[PlanItem], settings: Settings) -> pipeline.StageResult:
    """Convert a batch of files to Markdown."""
    return pipeline.convert_stage(items, max_bytes=int(settings.max_file_mb * 2**20),
                                  converter=runtime_for(settings).converter())


@task(name="chunk", tags=["kbsync", "chunk"], **COMMON)
def chunk_batch(converted: pipeline.StageResult, settings: Settings) -> pipeline.StageResult:
    """Chunk a batch of converted documents."""
    return pipeline.chunk_stage(converted.work, config=runtime_for(settings).chunk_config)


@task(name="embed", tags=["kbsync", "embed"], retries=2,
      retry_delay_seconds=5, retry_condition_fn=_transient, **COMMON)
def embed_batch(chunked: pipeline.StageResult, settings: Settings) -> pipeline.StageResult:
    """Embed a batch's chunks (cache first, then the provider in batches)."""
    return pipeline.embed_stage(chunked.work, service=runtime_for(settings).service)


@task(name="upsert", tags=["kbsync", "upsert"], retries=3,
      retry_delay_seconds=2, retry_condition_fn=_transient, **COMMON)
def upsert_batch(embedded: pipeline.StageResult, settings: Settings, *, namespace: str,
                 run_id: str) -> pipeline.StageResult:
    """Upsert, delete stale points, then commit state, document by document."""
    return room.write_batch(embedded.work, runtime=runtime_for(settings),
                              namespace=namespace, run_id=run_id)


@task(name="heal", tags=["kbsync", "embed"], retries=2, retry_delay_seconds=5,
      retry_condition_fn=_transient, **COMMON)
def heal_batch(items: list[PlanItem], settings: Settings, *, namespace: str,
               run_id: str) -> pipeline.StageResult:
    """Re-embed the zero-vector chunks of unchanged partial documents."""
    return room.heal_batch(items, runtime=runtime_for(settings), namespace=namespace,
                             run_id=run_id)


@task(name="finish-root", tags=["kbsync", "delete"], retries=3,
      retry_delay_seconds=2, retry_condition_fn=_transient, **COMMON)
def finish_root(rp: RootPlan, settings: Settings, *, namespace: str) -> int:
    """Refresh unchanged files' stat records; in full mode delete missing documents."""
    runtime = runtime_for(settings)
    room.finish_unchanged(rp, runtime)
    return room.delete_missing(rp, runtime, namespace)


@task(name="preflight", tags=["kbsync", "plan"], **COMMON)
def preflight_root(root: RootSpec, settings: Settings, *, namespace: str,
                   include: Sequence[str], exclude: Sequence[str], guard: DeleteGuard) -> int:
    """Full mode's mass-delete guard for one root, before any root is written."""
    return ingest_plan.preflight_root(root, runtime=runtime_for(settings), namespace=namespace,
                                 include=include, exclude=exclude, guard=guard)


@task(name="check-identity", tags=["kbsync", "plan"], **COMMON)
def check_identity(roots: list[RootSpec], settings: Settings, *, namespace: str,
                   rebind: bool) -> identity.IdentityPlan:
    """Root bindings and the embedder identity, checked before anything is written."""
    return identity.check_run(roots, runtime=runtime_for(settings), namespace=namespace,
                              rebind=rebind)


@task(name="record-identity", tags=["kbsync", "plan"], retries=3, retry_delay_seconds=2,
      retry_condition_fn=_transient, **COMMON)
def record_identity(plan: identity.IdentityPlan, settings: Settings, *, run_id: str) -> None:
    """Record new root bindings and a new collection's embedder (not on dry runs)."""
    identity.record_run(plan, runtime=runtime_for(settings), run_id=run_id)


@task(name="check-collection", tags=["kbsync", "plan"], retries=2, retry_delay_seconds=2,
      retry_condition_fn=_transient, **COMMON)
def check_collection(settings: Settings, *, namespace: str) -> str | None:
    """A warning when the chunk collection was missing while records exist (re-created)."""
    return verify.check_collection(runtime_for(settings), namespace)
