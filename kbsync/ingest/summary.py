"""A run's accounting, in one place: the summary (the JSON contract of ``kbsync ingest
--json``), the counters a stage may add to it, the :class:`Tally` the runner hands each
step's results to, and the counts a failed run carries on its exception.

Invariants:

- ``added + updated + unchanged + failed + not_attempted == files_seen``, on every exit of a
  run: a document planned but never reported counts as failed when the run stopped in its
  batch (:func:`account_unfinished`), and apart, as ``not_attempted``, when the run stopped
  before its batch began (:func:`account_not_attempted`);
- every :class:`Count` is a numeric field of :class:`IngestSummary`
  (``tests/ingest/test_counters.py``), and a stage counter that is not one is refused,
  so no count is dropped without a word;
- whatever ends a run, the counts it reached ride on the exception (:func:`keep_counts`,
  :func:`counts_of`).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Iterator, Mapping, Protocol, Sequence

from kbsync.convert import ignored_kind
from kbsync.errors import EmbeddingOutage, ErrorCode, KbsyncError
from kbsync.ingest.classify import PlanItem
from kbsync.ingest.plan import RootPlan
from kbsync.ingest.permission_counts import owner_only_warning, permission_counts
from kbsync.models import Failure, PlanAction


class Count(str, Enum):
    """A counter a stage may add to the summary (``Count.ADDED == "added"``).

    Every member is a numeric field of :class:`IngestSummary`; members are strings, so
    the JSON and a ``Counter``'s keys read as the plain names.
    """

    ADDED = "added"
    UPDATED = "updated"
    PARTIAL = "partial"
    CHUNKS_RAW = "chunks_raw"
    CHUNKS_KEPT = "chunks_kept"
    EMBEDDINGS_COMPUTED = "embeddings_computed"
    EMBEDDINGS_CACHED = "embeddings_cached"
    EMBEDDINGS_FAILED = "embeddings_failed"
    EMBEDDINGS_TRUNCATED = "embeddings_truncated"
    EMBEDDING_BISECT_REQUESTS = "embedding_bisect_requests"
    CONVERTER_WARNINGS = "converter_warnings"

    def __str__(self) -> str:
        return self.value


class StageCounts(Protocol):
    """What the summary reads of a stage's result (:class:`kbsync.ingest.stages.StageResult`,
    which imports :class:`Count` from here)."""

    @property
    def failures(self) -> Sequence[Failure]: ...
    @property
    def counters(self) -> Mapping[Count, int]: ...
    @property
    def seconds(self) -> Mapping[str, float]: ...


@dataclass
class IngestSummary:
    """The JSON contract of ``kbsync ingest --json`` (fields are stable).

    Invariant: ``added + updated + unchanged + failed + not_attempted == files_seen``.
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
    converter_warnings: int = 0  # notes of converters (a table flattened, a page skipped)
    # Wall seconds per stage (STAGES order): batch stages summed over batches, which overlap.
    stage_s: dict[str, float] = field(default_factory=dict)
    # recorded documents discovery could not read (a folder it may list but not enter, an
    # entry it could not stat): kept as indexed, never deleted, named in one warning
    kept_unreadable: int = 0
    # full mode: recorded documents the run's --include/--exclude left out: kept, not deleted
    kept_excluded: int = 0
    # ``ignored`` by kind: extension (lowercase), or "(no extension)" for an extensionless
    # file not read as text (kbsync.convert.ignored_kind)
    ignored_by_kind: dict[str, int] = field(default_factory=dict)
    # planned, never begun: the run stopped (a refusal, DiskFull, a signal) before their
    # batch; not failures of theirs, and the next run takes them up (issue 37)
    not_attempted: int = 0
    # documents whose points took new permissions with nothing converted or embedded (a
    # chmod, chown or setfacl of the file or a folder above it; a store from before
    # permissions were captured): docs/permissions.md
    permissions_updated: int = 0
    # documents whose permissions could not be read: visible to root only, named in a warning
    permissions_unreadable: int = 0
    # documents nobody but their owner (and root) may read: other readers never see them
    owner_only: int = 0
    # of ``failed``: files unchanged since they failed for their own content, reported again
    # as then and not converted (kbsync.catalog.failed); --force retries them
    failed_remembered: int = 0

    def to_dict(self) -> dict:
        """JSON form."""
        result = asdict(self)
        result["stage_s"] = {k: round(self.stage_s[k], 3) for k in STAGE_ORDER
                             if k in self.stage_s}
        return result

    def merge(self, part: dict) -> None:
        """Add a per-root summary (its dict form) into this one."""
        for key, value in part.items():
            if key in ("run_id", "namespace", "collection", "mode", "dry_run", "duration_s"):
                continue
            if key == "stage_s":
                add_seconds(self, value)
                continue
            if key == "ignored_by_kind":
                add_ignored(self, value)
                continue
            if key == "roots":  # a root in two parts (its idle slices, then its run): once
                self.roots.extend(r for r in value if r not in self.roots)
                continue
            current = getattr(self, key)
            setattr(self, key, current + value)

    def embedding_outage(self) -> bool:
        """True when documents needed embedding and every one of them failed to embed."""
        embed_failures = [f for f in self.failures if f["error"] == ErrorCode.EmbeddingFailed]
        return bool(embed_failures) and self.added + self.updated == 0


STAGES = ("checks", "plan", "convert", "chunk", "embed", "write", "finish")
"""The stages of ``stage_s``: ``checks`` (root bindings, embedder identity, collection),
``plan`` (discovery, hashing, the diff against the state, the store check), then per
batch ``convert`` (the first batch starts the conversion workers), ``chunk``, ``embed``
and ``write`` (upsert, stale-point delete and state commit, document by document), and
``finish`` (heal, stat refresh, full mode's deletions)."""

STAGE_ORDER = ("checks", "seal", *STAGES[1:])
"""The order of ``stage_s``: :data:`STAGES` plus ``seal``, only in a run that sealed the
embedded store's full appendable segments before its plan (the first run on a store made
before sealed segments, or after a run killed before its seal;
:meth:`kbsync.store.edge.store.EdgeStore.seal`)."""


def add_seconds(summary: IngestSummary, seconds: Mapping[str, float]) -> None:
    """Add per-stage wall seconds into ``summary.stage_s``."""
    for stage, value in seconds.items():
        summary.stage_s[stage] = summary.stage_s.get(stage, 0.0) + value


def add_ignored(summary: IngestSummary, by_kind: dict[str, int]) -> None:
    """Add ignored-file counts per kind into ``summary.ignored_by_kind`` (kept sorted)."""
    merged = dict(summary.ignored_by_kind)
    for kind, count in by_kind.items():
        merged[kind] = merged.get(kind, 0) + count
    summary.ignored_by_kind = dict(sorted(merged.items()))


def new_run_id() -> str:
    """A fresh run id (the Prefect flow uses its flow-run id instead)."""
    return str(uuid.uuid4())


def account_plan(summary: IngestSummary, rp: RootPlan) -> None:
    """Add a root's plan, or one slice of it, to the summary (files seen, unchanged, hashed,
    warnings); the root is named once."""
    counts = rp.plan.counts()
    if rp.root.name not in summary.roots:
        summary.roots.append(rp.root.name)
    summary.files_seen += (counts["new"] + counts["changed"] + counts["unchanged"]
                           + counts["heal"] + len(rp.plan.failures))
    summary.unchanged += counts["unchanged"]
    summary.ignored += len(rp.discovery.ignored)
    add_ignored(summary, dict(Counter(ignored_kind(rel) for rel in rp.discovery.ignored)))
    summary.kept_unreadable += len(rp.kept_unreadable)
    summary.kept_excluded += len(rp.kept_excluded)
    summary.files_hashed += rp.plan.hashed
    summary.failed_remembered += rp.plan.remembered
    owner_only, unreadable, warning = permission_counts(rp)
    summary.owner_only += owner_only
    summary.permissions_unreadable += unreadable
    summary.warnings.extend([warning] if warning else [])
    summary.warnings.extend(rp.warnings)
    summary.warnings.extend(f.message for f in rp.discovery.problems)
    _add_failures(summary, rp.plan.failures)


def account_dry_run(summary: IngestSummary, rp: RootPlan) -> None:
    """What a dry run reports: the plan's new/changed as added/updated, deletions as deleted,
    unchanged documents whose permissions changed as permissions_updated."""
    counts = rp.plan.counts()
    summary.added += counts["new"]
    summary.updated += counts["changed"] + counts["heal"]
    summary.deleted += len(rp.to_delete)
    summary.permissions_updated += sum(
        1 for i in rp.plan.of(PlanAction.UNCHANGED) if i.file is not None and i.previous
        is not None and i.file.access is not None and i.file.access != i.previous.access)


def account_stage(summary: IngestSummary, result: StageCounts) -> None:
    """Add a stage's counters and failures to the summary.

    Raises:
        ValueError: a counter that is not a :class:`Count` (a bug: it would be lost).
    """
    for key, value in result.counters.items():
        field_name = Count(key).value
        setattr(summary, field_name, getattr(summary, field_name) + value)
    add_seconds(summary, result.seconds)
    _add_failures(summary, result.failures)


def _add_failures(summary: IngestSummary, failures: Sequence[Failure]) -> None:
    summary.failures.extend(f.to_dict() for f in failures)
    summary.failed += len(failures)


def _stop_of(exc: BaseException) -> tuple[ErrorCode, str]:
    """The code and the one-line text of what stopped a run."""
    if isinstance(exc, KbsyncError):
        kind = exc.kind
    else:
        # Not an Exception: Ctrl-C, SystemExit, or an orchestrator's signal (Prefect's
        # TerminationSignal on SIGTERM): the run was stopped, nothing is broken.
        kind = ErrorCode.InternalError if isinstance(exc, Exception) else ErrorCode.Interrupted
    return kind, " ".join(str(exc).split()) or type(exc).__name__


def account_unfinished(summary: IngestSummary, items: Sequence, exc: BaseException) -> None:
    """Count ``items`` (the batch at work when the run stopped, never reported: a wrong
    dimension, a lost store, SIGTERM) as failed, each with one failure naming why, so the
    class invariant holds on that exit too. Their stored versions stay as they were (the
    batch may have been written in part); the next run takes them up again."""
    kind, text = _stop_of(exc)
    message = f"not processed: the run stopped first ({kind}: {text})"[:500]
    _add_failures(summary, [Failure(doc_id=item.doc_id,
                                    path=item.file.display if item.file else item.doc_id,
                                    error=kind, message=message) for item in items])


def account_not_attempted(summary: IngestSummary, items: Sequence, exc: BaseException) -> None:
    """Count ``items`` (planned, never begun: the run stopped before their batch) in
    ``not_attempted``, apart from ``failed`` (nothing of theirs failed), with one warning
    naming why; the next run takes them up."""
    if not items:
        return
    kind, text = _stop_of(exc)
    summary.not_attempted += len(items)
    summary.warnings.append(f"{len(items)} planned file(s) not attempted: the run stopped "
                            f"before their batch ({kind}: {text})"[:500])


def account_repaired(summary: IngestSummary, rp: RootPlan) -> None:
    """Count the root's documents planned for repair that did not fail (all, in a dry run)."""
    failed = {f["doc_id"] for f in summary.failures}
    summary.repaired += sum(1 for i in rp.to_process() if i.repair and (
        summary.dry_run or i.doc_id not in failed))




class Tally:
    """One run's (or one root's) accounting: the runner hands it what each step returned.

    The runner decides what runs; the tally alone writes the summary. Its invariant is the
    summary's: the counts add up on every exit, an exception included (:meth:`kept`).
    """

    def __init__(self, summary: IngestSummary) -> None:
        self.summary = summary

    @contextmanager
    def kept(self, *, started: float | None = None) -> Iterator[None]:
        """Any exception leaving the block carries the counts reached (:func:`attach`).

        One per summary (a run's, a root's): an inner block of the same summary would add
        its counts twice.

        Args:
            started: ``time.perf_counter()`` at the run's start, to fill ``duration_s``.
        """
        with keep_counts(self.summary, started=started):
            yield

    def stopped(self, exc: BaseException, *, at_work: Sequence[PlanItem],
                not_begun: Sequence[PlanItem]) -> None:
        """The run stops on ``exc`` with planned items never reported: those of the batch at
        work count as failed (:func:`account_unfinished`), the rest as not attempted
        (:func:`account_not_attempted`)."""
        account_unfinished(self.summary, at_work, exc)
        account_not_attempted(self.summary, not_begun, exc)

    @contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        """Add the block's wall seconds to ``stage_s[stage]`` (only when it ends normally)."""
        began = time.perf_counter()
        yield
        add_seconds(self.summary, {stage: time.perf_counter() - began})

    def warn(self, *warnings: str) -> None:
        """Add run warnings (checks' findings), in order."""
        self.summary.warnings.extend(warnings)

    def sealed(self, points: int, seconds: float) -> None:
        """A seal of the embedded store before the plan: ``stage_s["seal"]`` and a warning,
        when it sealed anything."""
        if points:
            add_seconds(self.summary, {"seal": seconds})
            self.warn(f"sealed {points} points of the embedded store in {seconds:.1f}s "
                      "(a store made before sealed segments, or a run stopped before its seal)")

    def planned(self, rp: RootPlan) -> None:
        """A root's plan (:func:`account_plan`); in a dry run, also all it reports
        (:func:`account_dry_run`, :func:`account_repaired`)."""
        account_plan(self.summary, rp)
        if self.summary.dry_run:
            account_dry_run(self.summary, rp)
            account_repaired(self.summary, rp)

    def add(self, *results: StageCounts) -> None:
        """Stage results (:func:`account_stage`), in order."""
        for result in results:
            account_stage(self.summary, result)

    def finished(self, rp: RootPlan, deleted: int, permissions_updated: int = 0) -> None:
        """A root's end: the documents its deletions removed, those whose points took new
        permissions, its repaired count."""
        self.summary.deleted += deleted
        self.summary.permissions_updated += permissions_updated
        account_repaired(self.summary, rp)

    def merge(self, part: dict) -> None:
        """A root's summary (its dict form, :meth:`IngestSummary.merge`)."""
        self.summary.merge(part)

    def close(self, started: float) -> IngestSummary:
        """The run's summary, its ``duration_s`` filled.

        Raises:
            EmbeddingOutage: documents needed embedding and every one failed to embed
                (the endpoint looks down), with the counts attached.
        """
        summary = self.summary
        summary.duration_s = round(time.perf_counter() - started, 3)
        warning = owner_only_warning(summary.files_seen, summary.owner_only)
        if warning is not None:
            summary.warnings.append(warning)
        if summary.embedding_outage():
            outage = EmbeddingOutage(f"every document failed to embed ({summary.failed} files); "
                                     "the embedding endpoint looks down; nothing new was stored")
            attach(outage, summary)
            raise outage
        return summary


# The counts a failed run reached, carried by its exception to whoever reports it.
#
# A run that fails (store unavailable, total embedding outage, lock held, ...) still owes its
# caller the counts it reached: ``kbsync ingest --json`` prints them beside ``error``. The run
# and its per-root subflows attach the summary reached so far to the exception as it passes;
# an enclosing run merges a nested run's counts into its own. The exception object travels
# unchanged through Prefect's in-process flow calls (and pickles with its attributes), and a
# caller that finds nothing attached reports zeros, so this is a best effort that never hides
# the error.

_ATTR = "kbsync_counts"


@contextmanager
def keep_counts(summary, *, started: float | None = None) -> Iterator[None]:
    """Attach ``summary.to_dict()`` to any exception leaving the block, then re-raise it.

    Args:
        summary: an :class:`IngestSummary` (anything with ``to_dict()`` and ``merge(dict)``).
        started: ``time.perf_counter()`` at the run's start, to fill ``duration_s``.

    Counts a nested run attached to the same exception are merged into
    ``summary`` first, so each level adds its own work exactly once.
    """
    try:
        yield
    except BaseException as exc:
        attach(exc, summary, started=started)
        raise


def attach(exc: BaseException, summary, *, started: float | None = None) -> None:
    """Attach the counts of ``summary`` (plus any nested run's already on ``exc``) to ``exc``."""
    inner = counts_of(exc)
    if inner is not None:
        summary.merge(inner)
    if started is not None:
        summary.duration_s = round(time.perf_counter() - started, 3)
    try:
        setattr(exc, _ATTR, summary.to_dict())
    except AttributeError:  # an exception type with __slots__: the caller reports zeros
        pass


def counts_of(exc: BaseException | None) -> dict | None:
    """The counts attached by :func:`keep_counts`, or ``None``.

    An exception raised while another one carrying counts was handled (SIGTERM's, raised
    again after Prefect's own ``TerminationSignal`` unwound the run) reports those.
    """
    seen = 0
    while exc is not None and seen < 8:
        counts = getattr(exc, _ATTR, None)
        if isinstance(counts, dict):
            return counts
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None
