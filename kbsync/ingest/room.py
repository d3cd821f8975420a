"""Every write of an ingest inside a booking of room on the embedded store's disk
(:mod:`kbsync.store.edge.diskspace`), so a full disk stops the run before a write
instead of killing the engine mid-write."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Sequence

from kbsync.ingest.context import IngestContext
from kbsync.ingest.plan import RootPlan
from kbsync.ingest.stages import DocWork, StageResult, heal_stage, write_stage
from kbsync.ingest.classify import PlanItem
from kbsync.catalog.access import changed_profiles, record_grants
from kbsync.ingest.write import delete_documents, touch_states, update_permissions
from kbsync.models import PlanAction
from kbsync.store.edge import diskspace
from kbsync.text.sparse import term_bound


def room_for(works: Sequence[DocWork], ctx: IngestContext, *, what: str = "the next batch",
             writes: bool = True) -> AbstractContextManager:
    """Book room on the embedded store's disk for writing ``works`` (DocWork with chunks).

    A context manager: the write goes inside it. A no-op when nothing is written
    (``writes`` false) or against a Qdrant server (``config.disk`` is None: only
    the embedding cache is local, and a cache write that fails is only a warning).

    Raises:
        DiskFull: a run-level error (never one document's failure); nothing of the
            batch was written, so every document keeps its previous version.
    """
    disk = ctx.config.disk
    if disk is None or not writes:
        return nullcontext()
    estimate = diskspace.estimate_batch(
        (([c.text for c in w.chunks], len(str(w.source.path)), [c.heading_path for c in w.chunks])
         for w in works), dimension=ctx.service.dimension if ctx.service else 0,
        sparse_terms=term_bound)
    if estimate.documents:
        what = f"{what} ({estimate.documents} documents, {estimate.chunks} chunks)"
    return diskspace.room(disk, need=estimate.total, what=what, margin=ctx.config.min_free_bytes)


def write_batch(works: Sequence[DocWork], ctx: IngestContext, *, namespace: str,
                run_id: str) -> StageResult:
    """The write stage inside :func:`room_for`."""
    with room_for(works, ctx, writes=bool(works)):
        return write_stage(works, runtime=ctx, namespace=namespace, run_id=run_id)


def withdraw_batch(doc_ids: Sequence[str], ctx: IngestContext, *, namespace: str) -> int:
    """Remove the stored documents a batch's convert stage withdrew (files that now hold a
    secret: :func:`kbsync.ingest.stages.convert_stage`), points first, then state; the
    next run sees such a file as new and refuses it again. Returns how many."""
    with room_for([], ctx, what="withdrawing documents that hold a secret",
                  writes=bool(doc_ids)):
        return delete_documents(doc_ids, store=ctx.store, states=ctx.states,
                                collection=ctx.collection, namespace=namespace)


def heal_batch(items: Sequence[PlanItem], ctx: IngestContext, *, namespace: str,
               run_id: str) -> StageResult:
    """The heal stage inside :func:`room_for` (its writes are re-embedded chunks)."""
    with room_for([], ctx, what="healing partial documents", writes=bool(items)):
        return heal_stage(items, runtime=ctx, namespace=namespace, run_id=run_id)


def finish_unchanged(rp: RootPlan, ctx: IngestContext, namespace: str) -> int:
    """Refresh size/mtime of unchanged files whose hash was checked, and give the points of
    those whose own permissions changed (or were never recorded) their new profile; record
    the new grants of profiles a folder's change altered (no point written): nothing
    converted or embedded. Returns how many documents took new permissions, either way."""
    pairs = [(i.file, i.previous) for i in rp.plan.of(PlanAction.UNCHANGED)
             if i.file is not None and i.previous is not None]
    moved = [f for f, p in pairs if f.access is not None and f.access != p.access]
    stale = bool(moved) or any((p.size, p.mtime_ns) != (f.size, f.mtime_ns) for f, p in pairs)
    regranted = changed_profiles(ctx.states, rp.discovery.profiles.values())
    with room_for([], ctx, what="refreshing state records", writes=stale or bool(regranted)):
        # A folder's change first: its profiles' records, no point (kbsync.catalog.access).
        record_grants(ctx.states, ((p.id, p.grants) for p in regranted))
        update_permissions(moved, store=ctx.store, states=ctx.states,
                           collection=ctx.collection, namespace=namespace)
        touch_states([f for f, _ in pairs], [p for _, p in pairs], ctx.states)
    # A folder's files may straddle two slices: the later one counts under the ids the
    # earlier one recorded (kept per root until its last slice).
    ids = ctx.states.regranted.setdefault((namespace, rp.root.name), set())
    ids.update(p.id for p in regranted)
    if rp.cursor is None:
        ctx.states.regranted.pop((namespace, rp.root.name), None)
    return len(moved) + sum(f.access in ids and f.access == p.access for f, p in pairs)


def delete_missing(rp: RootPlan, ctx: IngestContext, namespace: str) -> int:
    """Delete the documents full mode decided to remove from this root."""
    # Deleting writes to the engine's log first: it needs room too.
    with room_for([], ctx, what="deleting documents", writes=bool(rp.to_delete)):
        return delete_documents(rp.to_delete, store=ctx.store, states=ctx.states,
                                collection=ctx.collection, namespace=namespace)
