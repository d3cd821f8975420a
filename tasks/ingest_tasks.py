"""The ingest steps as Prefect tasks: one thin task per step of :mod:`kbsync.ingest.steps`.

A task takes the run's :class:`Settings` where its step takes the live context
(:data:`kbsync.ingest.executor.CONTEXT`) and looks the process's runtime up
(:func:`tasks.resources.runtime_for`), so a task can run in another process (a
Dask worker). Per-file errors, unexpected exceptions included, are captured by
the steps; a task fails only for a run-level problem. Steps in
:data:`kbsync.ingest.steps.RETRIED` are retried on transient errors: their
writes are idempotent, so a retried batch converges to the same points.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from prefect import Task, task
from prefect.states import Completed

from kbsync.ingest import steps
from kbsync.ingest.stages import StageResult
from kbsync.settings import Settings
from kbsync.text.chunk import ChunkConfig
from tasks.options import COMMON, transient
from tasks.refusals import refused
from tasks.resources import runtime_for, worker_runtime_for
from tasks.run_story import escape_controls


# COMMON: no cache (inputs are live batches, not hashable keys) and no result persistence
# (results are handed on in memory). No timeout_seconds either: tasks run in worker threads,
# where Prefect cannot interrupt a blocking call; per-file time limits belong to the converter.


def _retry(step: Callable) -> dict[str, Any]:
    """Retries of a step, from the step table: an embedding endpoint gets longer to recover."""
    kind = steps.STEPS[step].retry
    if kind is steps.Retry.NONE:
        return {}
    retries, delay = (2, 5) if kind is steps.Retry.ENDPOINT else (3, 2)
    return dict(retries=retries, retry_delay_seconds=delay, retry_condition_fn=transient)


NAMED = 5
"""Failed files a batch's state message names (the failures table lists all)."""


def _marked(result: StageResult | list[StageResult]) -> Any:
    """A batch with failed files ends in a named state the run graph shows.

    No tags on these tasks: Prefect asks the server for a concurrency slot per tag for
    every tagged task run, which cost 1-2 s per batch under load (measured).
    """
    failures = [f for r in (result if isinstance(result, list) else [result]) for f in r.failures]
    if not failures:
        return result
    # The task page shows the message: it names the files (the first few), as the run's log does.
    named = ", ".join(f"{escape_controls(f.doc_id)} ({f.error})" for f in failures[:NAMED])
    more = f", and {len(failures) - NAMED} more" if len(failures) > NAMED else ""
    return Completed(data=result, name="Completed with failures",
                     message=f"{len(failures)} files failed in this batch: {named}{more}")


@task(name="check-identity", **COMMON)
def check_identity(settings: Settings, roots: Sequence, namespace: str, rebind: bool):
    """Root bindings and the embedder identity, checked before anything is written (a
    refusal ends the task ``Refused``: :mod:`tasks.refusals`)."""
    try:
        return steps.check_identity(runtime_for(settings), roots, namespace, rebind)
    except Exception as exc:  # noqa: BLE001 - refused() raises anything but a refusal
        return refused(exc)


@task(name="preflight", **COMMON)
def preflight(settings: Settings, root, namespace: str, include, exclude, guard,
              limit: int | None = None) -> int:
    """Full mode's mass-delete guard for one root, in the run's slices of ``limit`` files
    (``Refused``: :mod:`tasks.refusals`)."""
    try:
        return steps.preflight(runtime_for(settings), root, namespace, include, exclude, guard,
                               limit)
    except Exception as exc:  # noqa: BLE001 - refused() raises anything but a refusal
        return refused(exc)  # type: ignore[return-value]


@task(name="record-identity", **COMMON, **_retry(steps.record_identity))
def record_identity(settings: Settings, plan, run_id: str) -> None:
    """Record new root bindings and a new collection's embedder."""
    steps.record_identity(runtime_for(settings), plan, run_id)


@task(name="check-collection", **COMMON,
      **_retry(steps.check_collection))
def check_collection(settings: Settings, namespace: str, create: bool) -> str | None:
    """A warning when the chunk collection was missing while records exist."""
    return steps.check_collection(runtime_for(settings), namespace, create)


@task(name="seal-store", **COMMON)
def seal_store(settings: Settings) -> dict:
    """Seal the embedded store's full appendable segments (see
    :func:`kbsync.ingest.steps.seal_store`)."""
    return steps.seal_store(runtime_for(settings))


@task(name="plan", **COMMON)
def plan(settings: Settings, root, namespace: str, mode, force: bool, include, exclude, guard,
         cursor=None, limit: int | None = None):
    """Plan a root's next slice of files: discover and diff against the stored state
    (writes nothing; :func:`kbsync.ingest.steps.plan`; ``Refused``: :mod:`tasks.refusals`)."""
    try:
        return steps.plan(runtime_for(settings), root, namespace, mode, force, include,
                          exclude, guard, cursor, limit)
    except Exception as exc:  # noqa: BLE001 - refused() raises anything but a refusal
        return refused(exc)


@task(name="batch", **COMMON, **_retry(steps.batch))
def batch(settings: Settings, chunk_config: ChunkConfig, items, namespace: str,
          run_id: str) -> list[StageResult]:
    """One batch: convert -> chunk -> embed -> upsert (see :func:`kbsync.ingest.steps.batch`)."""
    return _marked(steps.batch(runtime_for(settings), chunk_config, items, namespace, run_id))


@task(name="prepare", **COMMON, **_retry(steps.prepare))
def prepare(settings: Settings, chunk_config: ChunkConfig, items) -> list[StageResult]:
    """A batch's convert -> chunk -> embed, in a process that opens no store (a Dask
    worker process; see :func:`kbsync.ingest.steps.prepare`)."""
    return steps.prepare(worker_runtime_for(settings), chunk_config, items)


@task(name="write", **COMMON, **_retry(steps.write))
def write(settings: Settings, prepared, namespace: str, run_id: str) -> list[StageResult]:
    """Write a prepared batch, in the process holding the store."""
    return _marked(steps.write(runtime_for(settings), prepared, namespace, run_id))


@task(name="heal", **COMMON, **_retry(steps.heal))
def heal(settings: Settings, items, namespace: str, run_id: str) -> StageResult:
    """Re-embed the zero-vector chunks of unchanged partial documents."""
    return _marked(steps.heal(runtime_for(settings), items, namespace, run_id))


@task(name="finish-root", **COMMON, **_retry(steps.finish_root))
def finish_root(settings: Settings, rp, namespace: str) -> tuple[int, int]:
    """Refresh unchanged files' stat records and permissions; in full mode delete missing
    documents. Returns ``(deleted, permissions_updated)``."""
    return steps.finish_root(runtime_for(settings), rp, namespace)


TASK_OF: dict[Callable, Task] = {
    steps.check_identity: check_identity, steps.preflight: preflight,
    steps.record_identity: record_identity, steps.check_collection: check_collection,
    steps.plan: plan, steps.batch: batch, steps.heal: heal, steps.finish_root: finish_root,
    steps.prepare: prepare, steps.write: write, steps.seal_store: seal_store,
}
"""The task that runs each step the runner hands a Prefect executor (``add_text`` runs in
process only)."""
