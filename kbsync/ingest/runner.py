"""The one ingest runner: checks -> per root (plan -> batches -> finish) -> summary.

The Prefect flow (``flows/ingest.py``), the plain loop (:func:`run_plain`) and
``kbsync.api.add_text`` (:mod:`kbsync.ingest.texts`) all run their writes
through here, with an executor that decides where each step runs
(:mod:`kbsync.ingest.executor`). So the rules are one:

- two roots with one name are refused before anything is opened;
- under the write lock: a new collection's model (chosen once from its shares'
  language, where the executor chooses), then root bindings and embedder identity, then full mode's
  mass-delete guard for every root, then the records, then the collection
  check, all before the first document is written;
- a dry run plans and checks but writes nothing, not even a missing collection;
- when documents needed embedding and every one failed, the run raises
  :class:`~kbsync.errors.EmbeddingOutage` (the endpoint looks down);
- whatever ends the run, the counts reached ride on the exception: a root's too (a
  refusal in its last slice's plan after earlier slices were written), and the planned
  files the run never began count apart from the failed ones (``not_attempted``).

The runner hands every step's result to one :class:`~kbsync.ingest.summary.Tally`,
which alone writes the summary (:mod:`kbsync.ingest.summary`).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Sequence

from kbsync.errors import UsageError
from kbsync.ingest import steps
from kbsync.ingest.classify import PlanItem
from kbsync.ingest.context import IngestContext, RunContext
from kbsync.ingest.discover import iter_batches
from kbsync.ingest.executor import CONTEXT, Executor, InProcess
from kbsync.catalog.lock import WriteLocks, given_or_embedded
from kbsync.ingest.plan import DeleteGuard, RootPlan
from kbsync.ingest.progress import Meter
from kbsync.ingest.stages import StageResult
from kbsync.ingest.summary import Count, IngestSummary, Tally, new_run_id
from kbsync.models import PlanAction, RootSpec, SyncMode

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IngestRequest:
    """What to ingest, and how (the flow's parameters, as values)."""

    roots: tuple[RootSpec, ...]
    namespace: str = "default"
    mode: SyncMode = SyncMode.INCREMENTAL
    force: bool = False
    dry_run: bool = False
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    guard: DeleteGuard = DeleteGuard()
    rebind: bool = False
    run_id: str = field(default_factory=new_run_id)


def check_names(roots: Sequence[RootSpec]) -> None:
    """Refuse two roots with one name: their doc_ids would overwrite each other."""
    names = [r.name for r in roots]
    if len(set(names)) != len(names):
        raise UsageError(f"two roots share a name in {names}; use NAME=PATH to tell them apart")


def run_ingest(request: IngestRequest, executor: Executor) -> IngestSummary:
    """The whole ingest (see the module docstring for its rules).

    Raises:
        UsageError: two roots share a name.
        RootConflict, EmbedderMismatch: see :func:`kbsync.ingest.identity.check_run`.
        MassDeleteRefused: see :func:`kbsync.ingest.plan.plan_root`.
        EmbeddingOutage: every document that needed embedding failed to embed.
        KbsyncError: a run-level condition (store unavailable, disk full, lock held).
    """
    started = time.perf_counter()
    check_names(request.roots)
    tally = _new_tally(request, executor)
    with tally.kept(started=started):  # the counts reached travel with the error
        with executor.write_lock(request.namespace):
            with tally.timed("checks"):
                # Under the lock: two first ingests of one collection cannot choose twice.
                executor.choose_model(request.roots, dry_run=request.dry_run)
                _check_run(request, executor, tally)
            if not request.dry_run:
                sealed = executor.call(steps.seal_store, CONTEXT, label="seal-store")
                tally.sealed(sealed["points"], sealed["seconds"])
            meter = Meter(len(request.roots))
            for spec in request.roots:
                _run_root(spec, request, executor, meter, tally)
    return tally.close(started)


def _new_tally(request: IngestRequest, executor: Executor) -> Tally:
    return Tally(IngestSummary(run_id=request.run_id, namespace=request.namespace,
                               collection=executor.config.collection, mode=request.mode.value,
                               dry_run=request.dry_run))


def _check_run(request: IngestRequest, executor: Executor, tally: Tally) -> None:
    """Every check before the first write, in the order that keeps a refusal write-free."""
    ns = request.namespace
    # Identity first: a conflict must not reach the plan (full mode would count another
    # share's documents as missing).
    bound = executor.call(steps.check_identity, CONTEXT, request.roots, ns, request.rebind,
                          label="check-identity")
    tally.warn(*bound.warnings)
    if request.mode is SyncMode.FULL and not request.guard.allow_mass_delete:
        for spec in request.roots:
            executor.call(steps.preflight, CONTEXT, spec, ns, request.include, request.exclude,
                          request.guard, executor.config.files_per_slice,
                          label=f"preflight {spec.name}")
    if not request.dry_run:
        executor.call(steps.record_identity, CONTEXT, bound, request.run_id,
                      label="record-identity")
    missing = executor.call(steps.check_collection, CONTEXT, ns, not request.dry_run,
                            label="check-collection")
    tally.warn(*([missing] if missing else []))


def _run_root(spec: RootSpec, request: IngestRequest, executor: Executor, meter: Meter,
              tally: Tally) -> None:
    """One root into ``tally``: its slices planned here, in the run's own step
    (:meth:`Executor.here`), while each is idle (:func:`is_idle`) and finished here too; the
    first slice with work, and every slice after it, in the root's own run
    (:meth:`Executor.run_root`: an ``ingest-root`` subflow in Prefect). So a root with
    nothing to write costs its plan and no run at all: no subflow, no task."""
    quiet = _new_tally(request, executor)
    with quiet.kept():  # a refused plan carries the idle slices' counts
        cursor = None
        while True:
            with quiet.timed("plan"):
                rp = executor.here(steps.plan, *_plan_args(spec, request, executor, cursor),
                                   label=f"plan {spec.name}")
            if not is_idle(rp):
                break
            quiet.planned(rp)
            log.info("root %s: nothing to write in %d files%s", spec.name,
                     sum(rp.plan.counts().values()), "; more to plan" if rp.cursor else "")
            meter.planned(0, last_slice=rp.cursor is None)
            if not request.dry_run:
                with quiet.timed("finish"):
                    quiet.finished(rp, *executor.here(steps.finish_root, CONTEXT, rp,
                                                      request.namespace,
                                                      label=f"finish-root {spec.name}"))
            if rp.cursor is None:
                tally.merge(quiet.summary.to_dict())
                return
            cursor = rp.cursor
    tally.merge(quiet.summary.to_dict())  # before the root's run: its error carries its own

    def body() -> dict:
        return ingest_root(spec, request, executor, meter=meter, first=rp).to_dict()
    tally.merge(executor.run_root(spec.name, body))


def is_idle(rp: RootPlan) -> bool:
    """A plan (slice) with nothing to write: nothing to convert, heal or delete, and no
    unchanged file whose size, mtime or permissions moved. Finishing it writes at most a
    folder's new grants or the root's capture mark (:func:`kbsync.ingest.steps.finish_root`)."""
    if rp.to_process() or rp.to_delete or rp.plan.of(PlanAction.HEAL):
        return False
    return not any(item.record_moved() for item in rp.plan.of(PlanAction.UNCHANGED))


def ingest_root(spec: RootSpec, request: IngestRequest, executor: Executor, *,
                meter: Meter | None = None, first: RootPlan | None = None) -> IngestSummary:
    """One root, slice by slice (``config.files_per_slice`` files in doc_id order): plan the
    slice, run its batches through the stages, heal, finish it; the last slice also deletes
    what the root's plan deletes. The next slice is planned while this one's batches run
    (planning is mostly reading files to hash them; batches are mostly CPU), so the run holds
    at most two slices' plans.

    The plan also reprocesses documents whose points no longer match their state
    (``kbsync.catalog.checks.check_root``), counted in ``repaired``. ``meter`` is told each
    slice's plan and each batch (:mod:`kbsync.ingest.progress`).
    """
    meter = meter if meter is not None else Meter(1)
    tally = _new_tally(request, executor)
    with tally.kept():  # the root's counts reached ride on any exception (the run adds them)
        # "plan" counts the waits for plans (an executor that runs a step at once, as the
        # plain runner's does, plans inside the submit).
        planned: Any = None  # ``first``: planned by the caller, so drawn after nothing
        if first is None:
            with tally.timed("plan"):
                planned = _submit_plan(spec, request, executor, cursor=None)
        done = 0  # batches of the root's earlier slices
        while True:
            if planned is not None:
                with tally.timed("plan"):
                    [rp] = executor.gather([planned])
            else:  # the first slice, planned by the caller
                assert first is not None
                rp, first = first, None
            tally.planned(rp)  # in a dry run, all it reports
            log.info("root %s: %s, %d to delete%s", spec.name, rp.plan.counts(),
                     len(rp.to_delete), "; more to plan" if rp.cursor is not None else "")
            try:
                with tally.timed("plan"):
                    this, planned = planned, (None if rp.cursor is None else _submit_plan(
                        spec, request, executor, cursor=rp.cursor))
            except BaseException as exc:  # the next slice's plan refused, this one not begun
                if not request.dry_run:
                    tally.stopped(exc, at_work=(), not_begun=[*rp.to_process(),
                                                              *rp.plan.of(PlanAction.HEAL)])
                raise
            if not request.dry_run:
                meter.planned(len(rp.to_process()), last_slice=rp.cursor is None)
                done = _process_slice(spec, rp, request, executor, tally, this, done, meter)
            if planned is None:
                return tally.summary


def _plan_args(spec: RootSpec, request: IngestRequest, executor: Executor, cursor) -> tuple:
    """:func:`kbsync.ingest.steps.plan`'s arguments for the root's slice after ``cursor``."""
    return (CONTEXT, spec, request.namespace, request.mode, request.force, request.include,
            request.exclude, request.guard, cursor, executor.config.files_per_slice)


def _submit_plan(spec: RootSpec, request: IngestRequest, executor: Executor, *, cursor) -> Any:
    """Start planning the root's next slice (its first with ``cursor`` None)."""
    return executor.submit(steps.plan, *_plan_args(spec, request, executor, cursor),
                           label=f"plan {spec.name}")


def _process_slice(spec: RootSpec, rp: RootPlan, request: IngestRequest, executor: Executor,
                   tally: Tally, planned: Any, done: int, meter: Meter) -> int:
    """A slice's batches, its heal and its finish; returns the root's batches done.

    Planned work not yet reported, by batch number (the heal last): when the run stops, the
    batch at work counts as failed and the rest as not attempted (:meth:`Tally.stopped`),
    so the counts add up on that exit too, beside the batches done.
    """
    healing = rp.plan.of(PlanAction.HEAL)
    batches = list(iter_batches(rp.to_process(), executor.config.files_per_batch))
    work = _Unreported(dict(enumerate([*batches, healing])))
    try:
        for number, results in run_batches(spec.name, rp, request, executor,
                                           after=[planned] if planned is not None else [],
                                           before=done, work=work):
            tally.add(*results)
            meter.batch_done(len(batches[number]), _chunks_embedded(results))
            work.reported(number)
            done += 1
        with tally.timed("finish"):
            if healing:
                work.at_work = len(batches)
                tally.add(executor.call(steps.heal, CONTEXT, healing, request.namespace,
                                        request.run_id, label=f"heal {spec.name}"))
            work.reported(len(batches))
            finished = executor.call(steps.finish_root, CONTEXT, _with_listing(rp, tally),
                                     request.namespace, label=f"finish-root {spec.name}")
    except BaseException as exc:
        tally.stopped(exc, at_work=work.items(at_work=True), not_begun=work.items(at_work=False))
        raise
    tally.finished(rp, *finished)
    return done


def _with_listing(rp: RootPlan, tally: Tally) -> RootPlan:
    """``rp`` with the listing its root keeps once written (:mod:`kbsync.ingest.listing`):
    on the root's last slice, when its plan will be clean once written and the root's run
    (``tally``) wrote every file whole. So the no-op after a writing run reads no record
    either, as the one after a no-op."""
    if rp.cursor is None and rp.listing_once_written and wrote_whole(tally.summary):
        return replace(rp, listing=rp.listing_once_written)
    return rp


def wrote_whole(summary: IngestSummary) -> bool:
    """Whether a root's run stored every file it planned, whole: no failure but the
    remembered ones reported again, no chunk on a fallback vector (healed by a later run,
    which must plan it), no warning, nothing left unattempted, no permission unread."""
    return (summary.failed == summary.failed_remembered and not summary.partial
            and not summary.embeddings_failed and not summary.warnings
            and not summary.not_attempted and not summary.permissions_unreadable)


def _chunks_embedded(results: Sequence[StageResult]) -> int:
    """Chunks a batch embedded, computed or taken from the cache."""
    return sum(r.counters.get(Count.EMBEDDINGS_COMPUTED, 0)
               + r.counters.get(Count.EMBEDDINGS_CACHED, 0) for r in results)


@dataclass
class _Unreported:
    """A slice's planned items whose results were not handed to the tally yet, by batch
    number (0-based, in the slice; the heal last), and the batch at work: the one whose
    submit or gather runs (its items count as failed when the run stops, the rest as not
    attempted)."""

    batches: dict[int, list[PlanItem]]
    at_work: int | None = None

    def reported(self, number: int) -> None:
        self.batches.pop(number, None)
        if self.at_work == number:
            self.at_work = None

    def items(self, *, at_work: bool) -> list[PlanItem]:
        return [i for n, b in self.batches.items() if (n == self.at_work) is at_work for i in b]


def run_batches(root: str, rp: RootPlan, request: IngestRequest, executor: Executor, *,
                after: Sequence[Any] = (), before: int = 0,
                work: _Unreported | None = None) -> Iterator[tuple[int, list[StageResult]]]:
    """Each batch's number (0-based, in the slice) and stage results, in batch order, with a
    bounded window in flight.

    The window (``config.batches_in_flight``) means a run-level error (DiskFull, a
    lost store) stops the run after the batches already started, not after all.
    ``before``: the root's batches in its earlier slices (batches are numbered through
    the root; the total known is the batches planned so far, exact in its last slice).
    ``work.at_work`` is kept on the batch whose submit or gather runs. A submit that
    raises an ``Exception`` first hands over the batches already pending: an executor
    that runs a step at submit (the plain loop's) has written them.
    """
    config = executor.config
    batches = list(iter_batches(rp.to_process(), config.files_per_batch))
    if not batches:
        return
    work = work if work is not None else _Unreported({})
    total = before + len(batches)
    more = "+" if rp.cursor is not None else ""
    progress = executor.progress(root, total)
    pending: deque[tuple[int, Any]] = deque()
    for number, items in enumerate(batches, 1):
        work.at_work = number - 1
        try:
            handle = executor.submit(
                steps.batch, CONTEXT, executor.chunk_config, items, request.namespace,
                request.run_id, label=f"batch {root} {before + number}/{total}{more}",
                after=after)
        except Exception:
            failing = work.at_work
            for index, earlier in pending:  # gathered before the error is raised on
                work.at_work = index
                [results] = executor.gather([earlier])
                yield index, results
            work.at_work = failing
            raise
        pending.append((number - 1, handle))
        while pending and (len(pending) > config.batches_in_flight or number == len(batches)):
            index, handle = pending.popleft()
            work.at_work = index
            [results] = executor.gather([handle])
            yield index, results
            done = before + number - len(pending)
            progress(done)
            log.info("root %s: batch %d/%d%s done", root, done, total, more)


def run_plain(
    roots: Sequence[RootSpec], *, runtime: RunContext, namespace: str = "default",
    mode: SyncMode = SyncMode.INCREMENTAL, force: bool = False, dry_run: bool = False,
    include: Sequence[str] = (), exclude: Sequence[str] = (), guard: DeleteGuard = DeleteGuard(),
    rebind: bool = False, locks: WriteLocks | None = None,
) -> IngestSummary:
    """The whole ingest in this thread, without Prefect, under the write lock.

    Args:
        runtime: an open :class:`kbsync.runtime.Runtime`.
        locks: the front door's lock decision (``kbsync.app.locks.write_locks``); without
            it, the lock file of ``runtime.settings`` alone, on the embedded engine only
            (:func:`kbsync.catalog.lock.given_or_embedded`).
    Raises:
        UsageError: no ``locks`` against a Qdrant server.
        As :func:`run_ingest`.
    """
    request = IngestRequest(roots=tuple(roots), namespace=namespace, mode=mode, force=force,
                            dry_run=dry_run, include=tuple(include), exclude=tuple(exclude),
                            guard=guard, rebind=rebind)
    executor = InProcess(runtime, locks=given_or_embedded(locks, runtime.settings))
    return run_ingest(request, executor)


def process_batch(items: Sequence[PlanItem], *, runtime: IngestContext, namespace: str,
                  run_id: str) -> list[StageResult]:
    """:func:`kbsync.ingest.steps.batch` in this thread (``kbsync verify --repair``
    rebuilds documents through it)."""
    return steps.batch(runtime, runtime.chunk_config, items, namespace, run_id)
