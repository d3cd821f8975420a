"""The ingest runner."""

from __future__ import annotations

import time
from typing import Sequence

from kbsync.ingest import identity
from kbsync.ingest.discover import iter_batches
from kbsync.ingest.plan import DeleteGuard, plan_root
from kbsync.ingest.room import delete_missing, finish_unchanged, heal_batch, write_batch
from kbsync.ingest.stages import StageResult, chunk_stage, convert_stage, embed_stage
from kbsync.ingest.summary import (IngestSummary, account_dry_run, account_plan, account_repaired,
                                   account_stage, new_run_id)
from kbsync.ingest.verify import check_collection
from kbsync.models import PlanAction, RootSpec, SyncMode


def process_batch(items, *, runtime, namespace: str, run_id: str) -> list[StageResult]:
    """convert -> chunk -> embed -> write for one batch, in a plain call chain."""
    converted = convert_stage(items, max_bytes=int(runtime.settings.max_file_mb * 2**20),
                              converter=runtime.converter())
    chunked = chunk_stage(converted.work, config=runtime.chunk_config)
    embedded = embed_stage(chunked.work, service=runtime.service)
    written = write_batch(embedded.work, runtime=runtime, namespace=namespace, run_id=run_id)
    return [converted, chunked, embedded, written]


def run_plain(
    roots: Sequence[RootSpec], *, runtime, namespace: str = "default",
    mode: SyncMode = SyncMode.INCREMENTAL, force: bool = False, dry_run: bool = False,
    include: Sequence[str] = (), exclude: Sequence[str] = (), guard: DeleteGuard = DeleteGuard(),
    rebind: bool = False,
) -> IngestSummary:
    """The whole ingest without Prefect: the reference the flow is measured against.

    Raises:
        RootConflict, EmbedderMismatch: see :func:`kbsync.ingest.identity.check_run`
            (checked before anything is written; ``rebind`` accepts a moved share).
        MassDeleteRefused: see :func:`plan_root`.
    """
    started = time.perf_counter()
    summary = IngestSummary(run_id=new_run_id(), namespace=namespace,
                            collection=runtime.collection, mode=mode.value, dry_run=dry_run)
    bound = identity.check_run(roots, runtime=runtime, namespace=namespace, rebind=rebind)
    summary.warnings.extend(bound.warnings)
    missing = check_collection(runtime, namespace)  # re-creates a missing chunk collection
    summary.warnings.extend([missing] if missing else [])
    plans = [plan_root(r, runtime=runtime, namespace=namespace, mode=mode, force=force,
                       include=include, exclude=exclude, guard=guard) for r in roots]
    if not dry_run:
        identity.record_run(bound, runtime=runtime, run_id=summary.run_id)
    for rp in plans:
        account_plan(summary, rp)
        if dry_run:
            account_dry_run(summary, rp)
            account_repaired(summary, rp)
            continue
        for batch in iter_batches(rp.to_process(), runtime.settings.files_per_batch):
            for result in process_batch(batch, runtime=runtime, namespace=namespace,
                                        run_id=summary.run_id):
                account_stage(summary, result)
        account_stage(summary, heal_batch(rp.plan.of(PlanAction.HEAL), runtime=runtime,
                                          namespace=namespace, run_id=summary.run_id))
        finish_unchanged(rp, runtime)
        summary.deleted += delete_missing(rp, runtime, namespace)
        account_repaired(summary, rp)
    summary.duration_s = round(time.perf_counter() - started, 3)
    return summary
