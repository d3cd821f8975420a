"""Sealed segments of the embedded store: their layout, when they seal, and the open shard.

Split from ``edge.py`` (the store's locking and API) so the segment lifecycle lives in
one place. Facts about qdrant-edge-py 0.9.0 relied on here (checked by
``tests/store/test_edge_seal.py``):

- there is no background optimizer: a segment changes only inside
  ``EdgeShard.optimize()``, which blocks and holds the GIL;
- ``optimize()`` turns an appendable segment whose dense vectors exceed
  ``indexing_threshold`` KB into an immutable one built with the shard's
  ``hnsw_config`` and ``quantization_config``, and opens a fresh appendable segment;
  with ``HnswIndexConfig(m=0)`` no graph is built, so a seal costs a copy and a
  quantization of the segment and a rebuild of its payload and sparse indexes;
- ``max_segment_size`` equal to the threshold keeps the merge optimizer from
  merging sealed segments into larger ones (a merge would be one long call);
- ``ShardInfo.indexed_vectors_count`` counts the dense vectors of sealed segments plus
  every sparse vector, sealed or not: ``points_count - indexed_vectors_count`` is what the
  appendable segment holds only for a dense-only collection; at open the appendable
  segment's own version log is read too (:func:`unsealed_points`).

The layout: a segment seals when it holds :data:`kbsync.store.layout.SEAL_EVERY` points
(shared with the server adapter; chosen by ``tests/bench/store_bench.py --layouts``; see
docs/SCALING.md), read at call time. Sealed segments keep their
original vectors and payloads in mapped files (``Memory.Cold``) and int8 scalar-quantized
vectors (~1/4 of the float32 size) mapped too (:data:`QUANTIZED_MEMORY`); a dense search scans
the quantized vectors and rescores the best ``OVERSAMPLING`` x k on the originals (recall@10
against exact >= 0.99). Their payload indexes, sparse inverted index and id tracker are mapped
files as well (:data:`INDEX_MEMORY`), so opening a store maps them instead of reading or
rebuilding them in RAM.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import qdrant_edge as qe

from kbsync.errors import StoreDrift, StoreError, StoreUnavailable
from kbsync.store import layout
from kbsync.store.base import DENSE, SPARSE
from kbsync.errors import DiskFull
from kbsync.store.edge import diskspace, seals
from kbsync.store.edge.heap import release_free_heap
from kbsync.store.edge.check import (is_appendable, is_read_only_cause, read_only,
                                     require_whole_segments, seal_need, warm_mapped_files)
from kbsync.store.edge.query import CONFIG_FILE, errors as _errors
from kbsync.store.edge.shard_gate import ShardGate
from kbsync.store.layout import OVERSAMPLING, QUANTILE, seal_threshold_kb

log = logging.getLogger(__name__)

INDEX_MEMORY = qe.Memory.Cold
"""Placement of a sealed segment's payload indexes, sparse inverted index and id tracker:
mapped files, read on demand and left to the page cache. The engine's default keeps them
on the heap, and an open then rebuilt them for every sealed segment (reopen 12.9 s at 1M
chunks, docs/SCALING.md); mapped, an open reads a few small files per segment. A seal
costs the same either way (the index builds parse every payload: ``seal``)."""


QUANTIZED_MEMORY = qe.Memory.Cold
"""Placement of a sealed segment's int8 vectors: a mapped file, left to the page cache.
``Memory.Pinned`` (kbsync before) read them all into the heap on every open, 366 MiB at 1M
chunks of 384 dimensions, and kept them there for good; mapped, an open reads none, a dense
search reads them through the page cache (it scans them all, so on a machine with the RAM
they stay cached), and under memory pressure the kernel can drop them instead of the process
holding them (docs/SCALING.md). A store sealed with another placement keeps it
(:func:`load_config`)."""


def optimizers_config(dimension: int) -> Any:
    """The optimizer settings of every kbsync edge collection (set on create and on load).

    ``prevent_unoptimized=False``: never hide freshly written points until an
    optimization (the engine's deferred points); a written chunk is searchable at once.
    """
    threshold = seal_threshold_kb(dimension)
    return qe.EdgeOptimizersConfig(indexing_threshold=threshold, max_segment_size=threshold,
                                   prevent_unoptimized=False)


def hnsw_config() -> Any:
    """``m=0``: a sealed segment gets no graph (a graph costs ~100x the seal and holds the GIL)."""
    return qe.HnswIndexConfig(m=0, ef_construct=100, full_scan_threshold=10_000)


def quantization_config(memory: Any = QUANTIZED_MEMORY) -> Any:
    """int8 scalar quantization of sealed segments, the quantized vectors placed at ``memory``."""
    return qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8, quantile=QUANTILE,
                                       memory=memory)


def search_params() -> Any:
    """Dense search parameters: rescore the quantized candidates on the original vectors."""
    return qe.SearchParams(quantization=qe.QuantizationSearchParams(
        rescore=True, oversampling=OVERSAMPLING))


def collection_config(dimension: int, *, sparse: bool, placement: Any = INDEX_MEMORY,
                      quantized: Any = QUANTIZED_MEMORY) -> Any:
    """The ``EdgeConfig`` of a new collection, and the one given when opening a shard
    (what it leaves unset, the engine keeps as the shard has it): original vectors and
    payloads mapped, sealed segments int8-quantized without a graph (the int8 vectors placed
    at ``quantized``), their sparse index and id tracker placed at ``placement`` (``None``:
    the engine's default, on the heap)."""
    return qe.EdgeConfig(
        vectors={DENSE: qe.EdgeVectorParams(size=dimension, distance=qe.Distance.Cosine,
                                            memory=qe.Memory.Cold)},
        sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf,
                                                          memory=placement)}
        if sparse else None,
        hnsw_config=hnsw_config(), quantization_config=quantization_config(quantized),
        payload_memory=qe.Memory.Cold, id_tracker_memory=placement,
        optimizers=optimizers_config(dimension),
    )


def load_config(folder: Path, dimension: int, *, sparse: bool) -> Any:
    """The ``EdgeConfig`` to open the existing shard at ``folder`` with.

    A shard with sealed segments keeps the placements they were built with: given another
    one, the engine's next ``optimize()`` rebuilds every sealed segment in one call (17 s
    for 200k chunks when only the int8 vectors' placement changed; minutes at 1M, holding
    the GIL). So a store sealed with its indexes on the heap (kbsync before
    :data:`INDEX_MEMORY`), or its int8 vectors in RAM (before :data:`QUANTIZED_MEMORY`),
    works as before; a rebuild (``kbsync rebuild``) gives it today's layout. Every other
    shard gets today's placements.
    """
    placement: Any = INDEX_MEMORY
    quantized: Any = QUANTIZED_MEMORY
    if has_sealed_segments(folder):
        persisted = _persisted_config(folder)
        if str(persisted.get("id_tracker_memory") or "") != _memory_name(INDEX_MEMORY):
            placement = None
            log.info("edge collection at %s keeps its in-RAM indexes (sealed before they were "
                     "mapped); `kbsync rebuild` maps them", folder)
        kept = _sealed_quantized_memory(folder)
        if kept is not None and kept != QUANTIZED_MEMORY:
            quantized = kept
            log.info("edge collection at %s keeps its int8 vectors %s (sealed so); `kbsync "
                     "rebuild` maps them", folder, _memory_name(kept))
    return collection_config(dimension, sparse=sparse, placement=placement, quantized=quantized)


def _memory_name(memory: Any) -> str:
    """A placement as ``edge_config.json`` spells it: ``Memory.Cold`` -> ``"cold"``."""
    return str(memory).rsplit(".", 1)[-1].lower()


_MEMORY_BY_NAME = {_memory_name(m): m for m in (qe.Memory.Cold, qe.Memory.Cached, qe.Memory.Pinned)}


def _sealed_quantized_memory(folder: Path) -> Any:
    """The placement of the int8 vectors of the shard's sealed segments, as their own
    ``segment.json`` records it (``edge_config.json`` is rewritten by every load, so it
    says what the last open asked for, not what the segments hold); ``None`` if unknown."""
    for segment in sorted((folder / "segments").glob("*/")):
        if not (segment / "segment.json").is_file() or is_appendable(segment):
            continue
        try:
            config = json.loads((segment / "segment.json").read_text(encoding="utf-8"))
            scalar = config["config"]["vector_data"][DENSE]["quantization_config"]["scalar"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        return _MEMORY_BY_NAME.get(str(scalar.get("memory") or "").lower())
    return None


def _persisted_config(folder: Path) -> dict:
    """The shard's ``edge_config.json``; ``{}`` when it cannot be read."""
    try:
        config = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def has_sealed_segments(folder: Path) -> bool:
    """Whether the shard at ``folder`` has a sealed (non-appendable) segment."""
    return any(not is_appendable(segment) for segment in (folder / "segments").glob("*/")
               if (segment / "segment.json").is_file())


def is_sealed_layout(folder: Path) -> bool:
    """Whether the persisted config of the shard at ``folder`` has the sealed layout
    (``False`` for a shard made before issue 23, or an unreadable config)."""
    config = _persisted_config(folder)
    quant = (config.get("quantization_config") or {}).get("scalar") or {}
    return (config.get("hnsw_config") or {}).get("m") == 0 and quant.get("type") == "int8"


@dataclass
class Shard:
    """An open shard, its dense dimension, whether it has the sparse vector, the lock
    serialising its writes (and closing), and the gate its reads pass
    (:mod:`kbsync.store.edge.shard_gate`: reads run beside writes)."""

    shard: Any
    dimension: int
    sparse: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    gate: ShardGate = field(default_factory=ShardGate)
    unflushed: int = 0  # points upserted since the last flush (under ``lock``)
    unsealed: int = 0  # points written to the appendable segment since the last seal


def unsealed_points(shard: Any, folder: Path | None = None) -> int:
    """Points of the shard outside sealed segments (what the next seal would take).

    ``points - indexed vectors`` holds for dense vectors only: the engine counts every
    sparse vector as indexed, sealed or not, so on a hybrid collection (the default) that
    difference reads 0 however full the appendable segment is. With ``folder`` (the shard's,
    at open) the appendable segments' own point logs count too (:func:`appendable_points`),
    and the larger count wins: without it every open started the counter at 0, and a share
    whose runs each add fewer than ``SEAL_EVERY`` points never sealed across runs.
    """
    info = shard.info()
    counted = max(0, int(info.points_count) - int(info.indexed_vectors_count))
    return counted if folder is None else max(counted, appendable_points(folder))


APPENDABLE_VERSIONS = "mutable_id_tracker.versions"
"""An appendable segment's log of point versions, 8 bytes an entry (qdrant-edge-py 0.9.0;
``tests/store/test_edge_seal.py`` checks that writes across reopens seal)."""


def appendable_points(folder: Path) -> int:
    """Entries in the appendable segments' version logs of the shard at ``folder``: the
    points written there since the segment began, flushed (a rewrite of a point counts again,
    as :func:`after_upsert` counts it; writes still only in the WAL are not seen).

    An upper bound, not the live count: points an optimize moved out of the segment keep
    their entries (4,500 points written in one call with ``SEAL_EVERY=1000`` left 404 live
    points and 1,024 entries), so an open after a run that sealed may seal a small tail at
    once. Erring that way costs one small segment; erring the other way never sealed. The
    exact figure would be this process's own count, recorded at each flush and close."""
    total = 0
    for segment in (folder / "segments").glob("*/"):
        if is_appendable(segment):
            try:
                total += (segment / APPENDABLE_VERSIONS).stat().st_size // 8
            except OSError:
                continue  # an empty appendable segment has no log yet
    return total


def seal(handle: Shard, name: str, folder: Path) -> float:
    """Flush, then seal the appendable segment if it is full; call under ``handle.lock``.

    The flush first: a seal starts from flushed segments, so a kill during the seal
    loses nothing (the half-built segment is dropped on the next open,
    :func:`drop_half_built`). Returns the seconds spent.

    Raises:
        DiskFull: less free space under ``folder`` than the seal may write (the engine
            writes mapped files: on a full disk it would die of SIGBUS); nothing is sealed.
    """
    started, cpu = time.perf_counter(), time.thread_time()
    diskspace.require(folder, need=seal_need(folder), what=f"sealing a segment of {name!r}")
    with _errors("seal", name):
        handle.shard.flush()
        handle.unflushed = 0
        indexed = int(handle.shard.info().indexed_vectors_count)
        handle.shard.optimize()
        if (int(handle.shard.info().indexed_vectors_count) > indexed
                or handle.unsealed >= layout.SEAL_EVERY):
            handle.unsealed = unsealed_points(handle.shard)
        # else nothing was due (every run's first step, on a nearly full segment): the count
        # stands. The engine's reads 0 on a hybrid collection, so taking it here made the run
        # that crossed SEAL_EVERY seal nothing (the next run's first step sealed it, with a
        # warning). A count at SEAL_EVERY the engine does not agree with (the open's upper
        # bound, :func:`appendable_points`) is reset, or every write would call optimize.
    record_seals(folder, name)
    release_free_heap()  # what the seal built on the heap is in mapped files now
    took = time.perf_counter() - started
    # CPU beside wall time: on a shared machine the wall time is mostly waiting for a core.
    # This thread's CPU: the engine seals on the calling thread (its thread and process CPU
    # agree when nothing else runs), while reads in flight beside it burn the process's.
    log.info("edge collection %s: sealed a segment in %.2f s (%.2f s of CPU; %d points not "
             "sealed)", name, took, time.thread_time() - cpu, handle.unsealed)
    return took


def record_seals(folder: Path, name: str, *, add: bool = True) -> None:
    """List the segments a seal or an optimize just made in the shard's seal manifest, and
    drop those the engine removed (``add=False`` after a flush or close: drop only; see
    :func:`kbsync.store.edge.seals.record`); under ``handle.lock``. A manifest that cannot
    be written is logged: the segments stay unchecked, the seal stands."""
    try:
        added = seals.record(folder, add=add)
    except OSError as exc:
        log.warning("edge collection %s: the seal manifest cannot be written (%s): its new "
                    "sealed segments are not checked until it can", name, exc)
        return
    if added:
        log.debug("edge collection %s: checksums of sealed segment(s) %s recorded", name,
                  ", ".join(added))


def seal_reported(handle: Shard, name: str, folder: Path) -> dict:
    """:func:`seal` as ``EdgeStore.seal`` reports it: ``{"points": sealed, "seconds": spent}``
    (points counted by the engine's sealed vectors); a seal without disk room is postponed
    (logged; the writes' own room checks stop a run on a full disk). Under ``handle.lock``."""
    with _errors("seal", name):
        before = int(handle.shard.info().indexed_vectors_count)
    try:
        seconds = seal(handle, name, folder)
    except DiskFull as exc:
        log.warning("edge collection %s: seal postponed: %s", name, exc)
        return {"points": 0, "seconds": 0.0}
    with _errors("seal", name):
        sealed = int(handle.shard.info().indexed_vectors_count) - before
    return {"points": max(0, sealed), "seconds": round(seconds, 3) if sealed > 0 else 0.0}


def after_upsert(handle: Shard, name: str, folder: Path, points: int, flush_every: int) -> None:
    """Count ``points`` written; flush or seal when due. Call under ``handle.lock``.

    A seal refused for disk space is left for a later write (logged): the points are
    written and searchable unsealed; the writes' own room checks stop the run on a full disk.
    """
    handle.unflushed += points
    handle.unsealed += points
    if handle.unsealed >= layout.SEAL_EVERY:  # at call time: a test may lower it
        try:
            seal(handle, name, folder)
            return
        except DiskFull as exc:
            log.warning("edge collection %s: seal postponed: %s", name, exc)
    if handle.unflushed >= flush_every:
        with _errors("flush", name):
            handle.shard.flush()
        handle.unflushed = 0
        record_seals(folder, name, add=False)


def drop_half_built(folder: Path, name: str) -> int:
    """Remove the segments a killed seal left half-built; returns how many.

    The engine builds a sealed segment in ``temp_segments/segment_builder_*`` and swaps it
    in only when complete; a process killed meanwhile leaves the builder folder behind and
    the next load does not remove it (qdrant-edge-py 0.9.0). Only call while holding the
    store's folder lock: then no engine is building into it. The source segment is intact.
    """
    dropped = 0
    for builder in sorted((folder / "temp_segments").glob("segment_builder_*")):
        try:
            shutil.rmtree(builder)
        except OSError as exc:
            raise StoreError(f"edge store: cannot remove the half-built segment {builder} of "
                             f"collection {name!r}: {exc}") from exc
        dropped += 1
    if dropped:
        log.warning("edge collection %s: removed %d half-built segment(s) of an interrupted "
                    "seal (no point lost: the segment it sealed is intact)", name, dropped)
    return dropped


def load_shard(folder: Path, name: str, config: Any) -> Any:
    """Open a shard folder with ``config`` (``query.collection_config`` of its
    persisted dimension and sparse vector: the engine checks it against the segments and
    rewrites ``edge_config.json``, so an older shard gets the sealed layout and the
    optimizer settings; its segments seal on the next :func:`seal`).

    A folder the engine cannot read, or a sealed segment cut short on disk
    (:mod:`kbsync.store.edge.check`), is ``StoreDrift`` (one line).

    Seen with qdrant-edge-py 0.9.0 on a segment's id tracker overwritten with
    garbage ("Corrupted ID tracker mapping"); a *truncated* id tracker loads and
    silently loses points, which the ingest's store check catches instead.
    """
    drop_half_built(folder, name)
    require_whole_segments(folder, name)  # a short mapped file would SIGBUS a search
    seals.require_sound(folder, name)  # a removed sealed segment would serve fewer chunks
    files, seconds = warm_mapped_files(folder)
    log.debug("edge collection %s: read ahead %d mapped files in %.2f s", name, files, seconds)
    try:
        with _errors("load", name):
            return qe.EdgeShard.load(str(folder), config)
    except StoreUnavailable:
        raise
    except StoreError as exc:
        cause = " ".join(str(exc.__cause__ or exc).split())[:300]
        if is_read_only_cause(cause):  # a file it may read but not map read-write
            raise read_only(folder, cause) from exc
        raise StoreDrift(
            f"edge store: collection {name!r} at {folder} cannot be opened, its files are "
            f"damaged ({cause}); `kbsync verify --repair` sets a damaged chunk collection "
            "aside and rebuilds it from the files") from exc
