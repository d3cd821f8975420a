"""The run summary (the JSON contract of ``kbsync ingest --json``) and how each
step's results are added into it."""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Sequence

from kbsync.convert import ignored_kind
from kbsync.errors import ErrorCode, KbsyncError
from kbsync.ingest.counters import Count
from kbsync.ingest.plan import RootPlan
from kbsync.ingest.stages import StageResult
from kbsync.models import Failure


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
    converter_warnings: int = 0  # notes of converters (a table flattened, a page skipped)
    # Wall seconds per stage (STAGES order): batch stages summed over batches, which overlap.
    stage_s: dict[str, float] = field(default_factory=dict)
    # recorded documents discovery could not read (a folder it may list but not enter, an
    # entry it could not stat): kept as indexed, never deleted, named in one warning
    kept_unreadable: int = 0
    # ``ignored`` by kind: extension (lowercase), or "(no extension)" for an extensionless
    # file not read as text (kbsync.convert.ignored_kind)
    ignored_by_kind: dict[str, int] = field(default_factory=dict)

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
:meth:`kbsync.store.edge.EdgeStore.seal`)."""


def add_seconds(summary: IngestSummary, seconds: dict[str, float]) -> None:
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
    """Add a root's plan to the summary (files seen, unchanged, hashed, warnings)."""
    counts = rp.plan.counts()
    summary.roots.append(rp.root.name)
    summary.files_seen += (counts["new"] + counts["changed"] + counts["unchanged"]
                           + counts["heal"] + len(rp.plan.failures))
    summary.unchanged += counts["unchanged"]
    summary.ignored += len(rp.discovery.ignored)
    add_ignored(summary, dict(Counter(ignored_kind(rel) for rel in rp.discovery.ignored)))
    summary.kept_unreadable += len(rp.kept_unreadable)
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


def account_unfinished(summary: IngestSummary, items: Sequence, exc: BaseException) -> None:
    """Count ``items`` (planned for processing, never reported: the run stopped first, e.g.
    a wrong dimension, a lost store, SIGTERM) as failed, each with one failure naming why,
    so the class invariant holds on that exit too. Their stored versions stay as they were
    (a batch in flight may have been written already); the next run takes them up again."""
    if isinstance(exc, KbsyncError):
        kind = exc.kind
    else:
        # Not an Exception: Ctrl-C, SystemExit, or an orchestrator's signal (Prefect's
        # TerminationSignal on SIGTERM): the run was stopped, nothing is broken.
        kind = ErrorCode.InternalError if isinstance(exc, Exception) else ErrorCode.Interrupted
    text = " ".join(str(exc).split()) or type(exc).__name__
    message = f"not processed: the run stopped first ({kind}: {text})"[:500]
    _add_failures(summary, [Failure(doc_id=item.doc_id,
                                    path=item.file.display if item.file else item.doc_id,
                                    error=kind, message=message) for item in items])


def account_repaired(summary: IngestSummary, rp: RootPlan) -> None:
    """Count the root's documents planned for repair that did not fail (all, in a dry run)."""
    failed = {f["doc_id"] for f in summary.failures}
    summary.repaired += sum(1 for i in rp.to_process() if i.repair and (
        summary.dry_run or i.doc_id not in failed))


