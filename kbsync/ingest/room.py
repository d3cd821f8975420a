"""Every write of an ingest inside a booking of room on the embedded store's disk
(:mod:`kbsync.store.diskspace`), so a full disk stops the run before a write
instead of killing the engine mid-write."""

from __future__ import annotations

from contextlib import nullcontext

from kbsync.ingest.plan import RootPlan
from kbsync.ingest.stages import StageResult, heal_stage, write_stage
from kbsync.ingest.write import delete_documents, touch_states
from kbsync.models import PlanAction
from kbsync.store import diskspace


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


