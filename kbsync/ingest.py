"""Planning a root (with the mass-delete guard) and the run summary.

The Prefect flow and :func:`run_plain` share these functions, so the plain loop
measured by the benchmark does exactly the work the flow does.
"""

from __future__ import annotations

import logging
import time
import uuid
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from typing import Sequence

from kbsync import diskspace, identity
from kbsync.convert import is_supported
from kbsync.discover import Discovery, discover, iter_batches
from kbsync.errors import PermanentError
from kbsync.models import Failure, PlanAction, RootSpec, SyncMode, display_path
from kbsync.pipeline import (StageResult, chunk_stage, convert_stage, embed_stage, heal_stage,
                             write_stage)
from kbsync.state import Plan, PlanItem, plan_files
from kbsync.sync import delete_documents, touch_states
from kbsync.verify import StoreCheck, check_collection, check_root, damaged_documents

log = logging.getLogger(__name__)


class MassDeleteRefused(PermanentError):
    """Full mode would delete too much of a root; nothing was deleted."""


@dataclass(frozen=True)
class DeleteGuard:
    """Limits on what full mode may delete from one root."""

    allow_mass_delete: bool = False
    max_delete_fraction: float = 0.5


@dataclass
class RootPlan:
    """A root's discovery, its plan, and the documents full mode will delete."""

    root: RootSpec
    discovery: Discovery
    plan: Plan
    to_delete: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_process(self) -> list:
        """New and changed items, in doc_id order."""
        return self.plan.of(PlanAction.NEW) + self.plan.of(PlanAction.CHANGED)


def plan_root(
    root: RootSpec, *, runtime, namespace: str, mode: SyncMode, force: bool = False,
    include: Sequence[str] = (), exclude: Sequence[str] = (), guard: DeleteGuard = DeleteGuard(),
) -> RootPlan:
    """Discover ``root`` and diff it against the stored state. Writes nothing.

    The root's chunk count is checked against its records (one exact count,
    :func:`kbsync.verify.check_root`); when they differ, the points of each of
    its documents are counted, and those whose count differs from the record
    are planned ``changed`` with ``repair=True`` (counted in ``repaired``).

    Raises:
        MassDeleteRefused: full mode would empty the root or delete more than
            ``guard.max_delete_fraction`` of its documents without
            ``guard.allow_mass_delete``.
    """
    found = discover(root, accept=is_supported, include=include, exclude=exclude)
    states = runtime.states.load(namespace, root.name)
    check = check_root(runtime.store, runtime.collection, namespace, root.name, states)
    damaged = ([] if check.matches else
               damaged_documents(runtime.store, runtime.collection, namespace, states))
    plan = plan_files(found.files, states, fingerprint=runtime.fingerprint, force=force,
                      repair=frozenset(damaged))
    result = RootPlan(root=root, discovery=found, plan=plan)
    if not check.matches:
        _warn_drift(result, check, damaged)
    if not found.files and not found.ignored:
        result.warnings.append(f"root {root.name} ({display_path(root.path)}) holds no files")
    if mode is SyncMode.FULL:
        result.to_delete = _deletable(result, guard, len(states))
    return result


def _warn_drift(result: RootPlan, check: StoreCheck, damaged: Sequence[str]) -> None:
    """The ``warnings`` of a root whose store and state disagree: what is rebuilt, what
    is not (no file to rebuild from, or points no record names) and what to run."""
    gone = sorted({i.doc_id for i in result.plan.of(PlanAction.MISSING)} & set(damaged))
    result.warnings.append(f"{check.describe()}; reprocessing {len(damaged) - len(gone)} "
                           "documents whose points differ")
    if gone:
        result.warnings.append(
            f"root {result.root.name}: {len(gone)} documents whose points no longer match "
            f"their state have no file to rebuild them from (kept as they are: "
            f"{', '.join(gone[:5])}{', ...' if len(gone) > 5 else ''}); see `kbsync verify`")
    elif not damaged and not result.plan.of(PlanAction.NEW):
        # No document explains the difference (new ones may: a crash before their commit).
        result.warnings.append(
            f"root {result.root.name}: the store holds points no state record names; "
            "`kbsync verify --repair` deletes them")


def preflight_root(
    root: RootSpec, *, runtime, namespace: str, include: Sequence[str] = (),
    exclude: Sequence[str] = (), guard: DeleteGuard = DeleteGuard(),
) -> int:
    """Check full mode's guard for ``root`` without hashing anything.

    Run for every root before any root is processed, so a refusal leaves the
    whole run without a single write.

    Returns:
        How many documents full mode would delete from the root.
    Raises:
        MassDeleteRefused: as :func:`plan_root`.
    """
    found = discover(root, accept=is_supported, include=include, exclude=exclude)
    states = runtime.states.load(namespace, root.name)
    present = {f.doc_id for f in found.files}
    plan = Plan(items=[PlanItem(PlanAction.MISSING, None, s) for d, s in sorted(states.items())
                       if d not in present])
    return len(_deletable(RootPlan(root=root, discovery=found, plan=plan), guard, len(states)))


def _deletable(result: RootPlan, guard: DeleteGuard, known: int) -> list[str]:
    """Missing doc_ids full mode may delete, after the guard and unreadable-dir protection."""
    protected = tuple(p.doc_id + "/" for p in result.discovery.problems)
    missing = [i.doc_id for i in result.plan.of(PlanAction.MISSING)]
    deletable = [d for d in missing if not d.startswith(protected)]
    if len(deletable) < len(missing):
        result.warnings.append(f"{len(missing) - len(deletable)} missing documents under "
                               "unreadable directories were kept")
    if not deletable or guard.allow_mass_delete:
        return deletable
    name = result.root.name
    if not result.discovery.files:
        raise MassDeleteRefused(
            f"root {name} ({display_path(result.root.path)}) holds no files; full mode would "
            f"delete all {len(deletable)} of its documents. Nothing was deleted. Check the share "
            "is mounted, or pass --allow-mass-delete.")
    fraction = len(deletable) / max(known, 1)
    if fraction > guard.max_delete_fraction:
        raise MassDeleteRefused(
            f"full mode would delete {len(deletable)} of {known} documents of root {name} "
            f"({fraction:.0%} > {guard.max_delete_fraction:.0%}). Nothing was deleted. Pass "
            "--allow-mass-delete or raise --max-delete-fraction.")
    return deletable


@dataclass
class IngestSummary:
    """The JSON contract of ``kbsync ingest --json`` (fields are stable).

    Invariant: ``added + updated + unchanged + failed == files_seen``.
    """

    run_id: str
    namespace: str
    collection: str
    mode: str
    dry_run: bool
    files_seen: int = 0
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    deleted: int = 0
    failed: int = 0
    ignored: int = 0
    chunks_raw: int = 0
    chunks_kept: int = 0
    embeddings_computed: int = 0
    embeddings_cached: int = 0
    embeddings_failed: int = 0
    duration_s: float = 0.0
    failures: list[dict] = field(default_factory=list)
    roots: list[str] = field(default_factory=list)
    files_hashed: int = 0
    partial: int = 0
    embeddings_truncated: int = 0
    warnings: list[str] = field(default_factory=list)
    repaired: int = 0  # reprocessed because their points no longer matched the state
    embedding_bisect_requests: int = 0  # requests spent isolating inputs an endpoint refused

    def to_dict(self) -> dict:
        """JSON form."""
        return asdict(self)

    def merge(self, part: dict) -> None:
        """Add a per-root summary (its dict form) into this one."""
        for key, value in part.items():
            if key in ("run_id", "namespace", "collection", "mode", "dry_run", "duration_s"):
                continue
            current = getattr(self, key)
            setattr(self, key, current + value)

    def embedding_outage(self) -> bool:
        """True when documents needed embedding and every one of them failed to embed."""
        embed_failures = [f for f in self.failures if f["error"] == "EmbeddingFailed"]
        return bool(embed_failures) and self.added + self.updated == 0


def new_run_id() -> str:
    """A fresh run id (the Prefect flow uses its flow-run id instead)."""
    return str(uuid.uuid4())


def account_plan(summary: IngestSummary, rp: RootPlan) -> None:
    """Add a root's plan to the summary (files seen, unchanged, hashed, warnings)."""
    counts = rp.plan.counts()
    summary.roots.append(rp.root.name)
    summary.files_seen += (counts["new"] + counts["changed"] + counts["unchanged"]
                           + counts["heal"] + len(rp.plan.failures))
    summary.unchanged += counts["unchanged"]
    summary.ignored += len(rp.discovery.ignored)
    summary.files_hashed += rp.plan.hashed
    summary.warnings.extend(rp.warnings)
    summary.warnings.extend(f.message for f in rp.discovery.problems)
    _add_failures(summary, rp.plan.failures)


def account_dry_run(summary: IngestSummary, rp: RootPlan) -> None:
    """What a dry run reports: the plan's new/changed as added/updated, deletions as deleted."""
    counts = rp.plan.counts()
    summary.added += counts["new"]
    summary.updated += counts["changed"] + counts["heal"]
    summary.deleted += len(rp.to_delete)


def account_stage(summary: IngestSummary, result: StageResult) -> None:
    """Add a stage's counters and failures to the summary."""
    for key, value in result.counters.items():
        if hasattr(summary, key) and key not in ("failures",):
            setattr(summary, key, getattr(summary, key) + value)
    _add_failures(summary, result.failures)


def _add_failures(summary: IngestSummary, failures: Sequence[Failure]) -> None:
    summary.failures.extend(f.to_dict() for f in failures)
    summary.failed += len(failures)


def account_repaired(summary: IngestSummary, rp: RootPlan) -> None:
    """Count the root's documents planned for repair that did not fail (all, in a dry run)."""
    failed = {f["doc_id"] for f in summary.failures}
    summary.repaired += sum(1 for i in rp.to_process() if i.repair and (
        summary.dry_run or i.doc_id not in failed))


def room_for(works, runtime, *, what: str = "the next batch", writes: bool = True):
    """Book room on the embedded store's disk for writing ``works`` (DocWork with chunks).

    A context manager: the write goes inside it. A no-op when nothing is written
    (``writes`` false) or against a Qdrant server (only the embedding cache is local,
    and a cache write that fails is only a warning).

    Raises:
        DiskFull: a run-level error (never one document's failure); nothing of the
            batch was written, so every document keeps its previous version.
    """
    settings = runtime.settings
    if settings.qdrant_url or not writes:
        return nullcontext()
    estimate = diskspace.estimate_batch(
        (([c.text for c in w.chunks], len(str(w.source.path)), [c.heading_path for c in w.chunks])
         for w in works), dimension=runtime.service.dimension if runtime.service else 0)
    if estimate.documents:
        what = f"{what} ({estimate.documents} documents, {estimate.chunks} chunks)"
    return diskspace.room(settings.store_path, need=estimate.total, what=what,
                          margin=int(settings.min_free_mb * diskspace.MIB))


def write_batch(works, *, runtime, namespace: str, run_id: str) -> StageResult:
    """The write stage inside :func:`room_for` (the flow's upsert task and
    :func:`run_plain` both write through here)."""
    with room_for(works, runtime, writes=bool(works)):
        return write_stage(works, runtime=runtime, namespace=namespace, run_id=run_id)


def heal_batch(items, *, runtime, namespace: str, run_id: str) -> StageResult:
    """The heal stage inside :func:`room_for` (its writes are re-embedded chunks)."""
    with room_for([], runtime, what="healing partial documents", writes=bool(items)):
        return heal_stage(items, runtime=runtime, namespace=namespace, run_id=run_id)


def finish_unchanged(rp: RootPlan, runtime) -> None:
    """Refresh size/mtime of unchanged files whose hash was checked."""
    items = [i for i in rp.plan.of(PlanAction.UNCHANGED) if i.previous is not None]
    stale = any((i.previous.size, i.previous.mtime_ns) != (i.file.size, i.file.mtime_ns)
                for i in items)
    with room_for([], runtime, what="refreshing state records", writes=stale):
        touch_states([i.file for i in items], [i.previous for i in items], runtime.states)


def delete_missing(rp: RootPlan, runtime, namespace: str) -> int:
    """Delete the documents full mode decided to remove from this root."""
    # Deleting writes to the engine's log first: it needs room too.
    with room_for([], runtime, what="deleting documents", writes=bool(rp.to_delete)):
        return delete_documents(rp.to_delete, store=runtime.store, states=runtime.states,
                                collection=runtime.collection, namespace=namespace)


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
        RootConflict, EmbedderMismatch: see :func:`kbsync.identity.check_run`
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
