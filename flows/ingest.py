"""The ``ingest`` flow: roots -> (one subflow per root) -> batches of
convert -> chunk -> embed -> upsert, then the run summary.

The flow only arranges tasks; the work lives in ``kbsync`` and ``tasks``.
It ends Failed when any file failed (after writing the summary artifact) and
returns the JSON summary either way.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Annotated

from prefect import flow, get_run_logger
from prefect.futures import wait
from prefect.runtime import flow_run
from prefect.states import Failed
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import Field

from kbsync.ingest.discover import iter_batches, local_root, parse_root, root_parameter
from kbsync.errors import EmbeddingOutage, FilesFailed, UsageError
from kbsync.ingest.plan import DeleteGuard
from kbsync.ingest.summary import IngestSummary, account_dry_run, account_plan, account_repaired, account_stage, new_run_id
from kbsync.models import PlanAction, SyncMode
from kbsync.ingest.run_counts import attach, keep_counts
from kbsync.settings import Settings
from tasks import ingest_tasks as t
from tasks.locking import run_lock
from tasks.artifacts import publish_summary, report_progress, start_progress
from tasks.resources import release
from tasks.runners import build_task_runner
from tasks.watchdog import FLOW_HOOKS, start_flow_watch

# Parameter descriptions live in the flow's Args docstring: Prefect builds the deployment's
# parameter schema (the UI form) from it and drops `Field(description=...)` metadata.


@flow(name="ingest-root", task_runner=ThreadPoolTaskRunner(max_workers=3),
      flow_run_name="ingest-root-{root_name}")
def ingest_root(root: str, root_name: str, namespace: str, mode: SyncMode, force: bool, dry_run: bool,
                include: list[str], exclude: list[str], allow_mass_delete: bool,
                max_delete_fraction: float, run_id: str) -> dict:
    """One root: plan, then batches through the four stages, then deletions.

    The plan also reprocesses documents whose points no longer match their state
    (``kbsync.ingest.verify.check_root``), counted in ``repaired``.
    """
    logger = get_run_logger()
    settings = Settings()
    spec = parse_root(local_root(root))
    summary = IngestSummary(run_id=run_id, namespace=namespace, collection=settings.collection,
                            mode=mode.value, dry_run=dry_run)
    guard = DeleteGuard(allow_mass_delete, max_delete_fraction)
    rp = t.plan_root(spec, settings, namespace=namespace, mode=mode, force=force,
                     include=include, exclude=exclude, guard=guard)
    account_plan(summary, rp)
    logger.info("root %s: %s, %d to delete", spec.name, rp.plan.counts(), len(rp.to_delete))
    if dry_run:
        account_dry_run(summary, rp)
        account_repaired(summary, rp)
        return summary.to_dict()
    with keep_counts(summary):  # a failure still reports the batches done (run_counts)
        batches = list(iter_batches(rp.to_process(), settings.files_per_batch))
        progress = start_progress(spec.name) if batches else None
        # A bounded window of batches in flight: a run-level error (DiskFull, a lost store)
        # stops the run after the batches already started instead of running every one.
        window, pending, done = 2 * settings.task_workers, deque(), 0
        for number, batch in enumerate(batches, 1):
            converted = t.convert_batch.submit(batch, settings)
            chunked = t.chunk_batch.submit(converted, settings)
            embedded = t.embed_batch.submit(chunked, settings)
            written = t.upsert_batch.submit(embedded, settings, namespace=namespace,
                                            run_id=run_id)
            pending.append((converted, chunked, embedded, written))
            while pending and (len(pending) > window or number == len(batches)):
                futures = pending.popleft()
                wait(list(futures))
                for future in futures:
                    account_stage(summary, future.result())
                done += 1
                report_progress(progress, done, len(batches))
                logger.info("root %s: batch %d/%d done", spec.name, done, len(batches))
        healing = rp.plan.of(PlanAction.HEAL)
        if healing:
            account_stage(summary, t.heal_batch(healing, settings, namespace=namespace,
                                                run_id=run_id))
        summary.deleted += t.finish_root(rp, settings, namespace=namespace)
        account_repaired(summary, rp)
    return summary.to_dict()


@flow(name="ingest", log_prints=False, validate_parameters=True, **FLOW_HOOKS)
def ingest(
    roots: Annotated[list[str], Field(min_length=1)],
    namespace: Annotated[str, Field(min_length=1, max_length=200)] = "default",
    mode: SyncMode = SyncMode.INCREMENTAL,
    force: bool = False,
    dry_run: bool = False,
    include: list[str] = [],  # noqa: B006 - Prefect parameters need literal defaults
    exclude: list[str] = [],  # noqa: B006
    allow_mass_delete: bool = False,
    max_delete_fraction: Annotated[float, Field(ge=0, le=1)] = 0.5,
    rebind: bool = False,
) -> dict:
    """Sync directories into the knowledge base and return the JSON summary.

    Relative root paths resolve against the run's working directory (the project
    directory for the deployments in prefect.yaml). One line per argument: Prefect
    turns these into the parameter descriptions of the deployment form.

    Args:
        roots: Directories to sync; NAME=PATH sets the doc_id prefix (default: last path part).
        namespace: Tenant/namespace the documents belong to.
        mode: incremental never deletes; full deletes documents of these roots that are gone.
        force: Reprocess every file even if unchanged.
        dry_run: Only plan and report; write nothing.
        include: Glob patterns (relative path or name); only matching files are synced.
        exclude: Glob patterns (relative path or name); matching files are left out.
        allow_mass_delete: Let full mode empty a root or delete over max_delete_fraction.
        max_delete_fraction: Largest share of a root's documents full mode may delete (0-1).
        rebind: A root NAME bound to another path moved here: rebind it, keep its documents.
    """
    started = time.perf_counter()
    logger = get_run_logger()
    settings = Settings()
    start_flow_watch(settings)  # a lost Prefect API ends the run within a bound (tasks.watchdog)
    # Root paths travel as valid UTF-8 (\xNN for bytes that are not): see root_parameter.
    specs = [parse_root(local_root(r)) for r in roots]
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise UsageError(f"two roots share a name in {names}; use NAME=PATH to tell them apart")
    run_id = str(flow_run.get_id() or new_run_id())
    summary = IngestSummary(run_id=run_id, namespace=namespace, collection=settings.collection,
                            mode=mode.value, dry_run=dry_run)
    guard = DeleteGuard(allow_mass_delete, max_delete_fraction)
    try:
        with run_lock(settings, namespace):
            # Root bindings and embedder identity first: a conflict must not reach the
            # plan (full mode would count another share's documents as missing).
            bound = t.check_identity(specs, settings, namespace=namespace, rebind=rebind)
            summary.warnings.extend(bound.warnings)
            if mode is SyncMode.FULL and not allow_mass_delete:
                for spec in specs:
                    t.preflight_root(spec, settings, namespace=namespace, include=include,
                                     exclude=exclude, guard=guard)
            if not dry_run:
                t.record_identity(bound, settings, run_id=run_id)
            missing = t.check_collection(settings, namespace=namespace)  # re-creates it
            summary.warnings.extend([missing] if missing else [])
            for spec in specs:
                per_root = ingest_root.with_options(task_runner=build_task_runner(settings))
                part = per_root(root=root_parameter(f"{spec.name}={spec.path}"), root_name=spec.name, namespace=namespace,
                                   mode=mode, force=force, dry_run=dry_run, include=include,
                                   exclude=exclude, allow_mass_delete=allow_mass_delete,
                                   max_delete_fraction=max_delete_fraction, run_id=run_id)
                summary.merge(part)
    except BaseException as exc:  # the CLI reports the counts reached beside the error
        attach(exc, summary, started=started)
        raise
    finally:
        release(settings)
    summary.duration_s = round(time.perf_counter() - started, 3)
    result = summary.to_dict()
    publish_summary(result)
    logger.info("ingest %s: added %d, updated %d, unchanged %d, deleted %d, failed %d",
                namespace, summary.added, summary.updated, summary.unchanged, summary.deleted,
                summary.failed)
    if summary.embedding_outage():
        outage = EmbeddingOutage(f"every document failed to embed ({summary.failed} files); "
                                 "the embedding endpoint looks down; nothing new was stored")
        attach(outage, summary)
        raise outage
    if summary.failed:
        # The summary rides on an exception: Prefect resolves a Failed state's data into one.
        message = f"{summary.failed} of {summary.files_seen} files failed"
        return Failed(message=message, data=FilesFailed(message, result))
    return result
