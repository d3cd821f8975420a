"""Layouts of the embedded engine side by side (``store_bench.py --layouts``; a script).

Each layout runs in its own child process (so peak RSS is its own) on the same
``N`` random unit vectors (dim 384, 10 namespaces, a tenant index, chunk-sized
payload text, a small sparse vector), loaded in update calls of 1,024:

- ``appendable``: one appendable segment, no vector index (kbsync before issue 23);
- ``m0``: ``HnswIndexConfig(m=0)``, the appendable segment sealed every ``--seal-every``
  points by ``optimize()`` (immutable, vectors mapped, no graph);
- ``m0_int8``: as ``m0`` plus int8 scalar quantization (quantized vectors in RAM), searched
  with rescoring on the original vectors (oversampling ``OVERSAMPLING``);
- ``m0_int8_end``: as ``m0_int8`` but sealed once, at the end of the load (one call);
- ``hnsw16``: HNSW m=16 graph built at the end (only at <= 100k: it is ~100x the seal).

Per layout: the longest single ``optimize()`` call and their total (the seal cost),
dense p50/p95 unfiltered and filtered on one namespace (10%), hybrid p50/p95 (dense +
sparse prefetches fused by RRF, payloads of the k results only), reopen (load + count
+ first search), peak RSS, and recall@10 of the unfiltered dense search against exact
search (numpy over the same vectors, streamed batch by batch: the bench keeps no copy).
The 1-minute load average is sampled beside each figure.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import qdrant_edge as qe

DIM = 384
NAMESPACES = 10
BATCH = 1024
LIMIT = 10
OVERSAMPLING = 2.0
DENSE, SPARSE = "dense", "sparse"
LAYOUTS = ("appendable", "m0", "m0_int8", "m0_int8_end", "hnsw16")
HNSW_MAX = 100_000
TEXT = "lorem ipsum dolor sit amet consectetur adipiscing elit " * 28  # ~1.5 KB, a chunk


def _load1() -> float:
    return os.getloadavg()[0]


def _vectors(start: int, stop: int) -> np.ndarray:
    """Batch ``start // BATCH`` of the vectors, the same in every process."""
    rng = np.random.default_rng(1_000_003 + start)
    vectors = rng.standard_normal((stop - start, DIM), dtype=np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _queries(n: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    queries = rng.standard_normal((n, DIM), dtype=np.float32)
    return queries / np.linalg.norm(queries, axis=1, keepdims=True)


def exact_top(size: int, queries: np.ndarray) -> list[set[int]]:
    """The exact top ``LIMIT`` ids (1-based) of each query over all ``size`` vectors."""
    best_s = np.full((len(queries), LIMIT), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(queries), LIMIT), dtype=np.int64)
    for start in range(0, size, BATCH):
        stop = min(start + BATCH, size)
        scores = queries @ _vectors(start, stop).T
        all_s = np.concatenate([best_s, scores], axis=1)
        ids = np.broadcast_to(np.arange(start + 1, stop + 1), scores.shape)
        all_i = np.concatenate([best_i, ids], axis=1)
        top = np.argpartition(-all_s, LIMIT - 1, axis=1)[:, :LIMIT]
        best_s = np.take_along_axis(all_s, top, axis=1)
        best_i = np.take_along_axis(all_i, top, axis=1)
    return [set(row.tolist()) for row in best_i]


def _config(layout: str, seal_every: int) -> qe.EdgeConfig:
    seal_kb = seal_every * DIM * 4 // 1024  # the engine's thresholds count vector KB
    if layout == "appendable":
        return qe.EdgeConfig(
            vectors={DENSE: qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine)},
            sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
            optimizers=qe.EdgeOptimizersConfig(indexing_threshold=0, prevent_unoptimized=False))
    quant = (qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8, quantile=0.99,
                                         memory=qe.Memory.Pinned)
             if "int8" in layout else None)
    m = 16 if layout == "hnsw16" else 0
    threshold = 1 if layout in ("m0_int8_end", "hnsw16") else seal_kb
    return qe.EdgeConfig(
        vectors={DENSE: qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine,
                                            memory=qe.Memory.Cold)},
        sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        hnsw_config=qe.HnswIndexConfig(m=m, ef_construct=100, full_scan_threshold=10_000,
                                       payload_m=16 if m else None),
        quantization_config=quant, payload_memory=qe.Memory.Cold,
        optimizers=qe.EdgeOptimizersConfig(
            indexing_threshold=threshold,
            max_segment_size=None if threshold == 1 else seal_kb, prevent_unoptimized=False))


def _params(layout: str):
    if "int8" not in layout:
        return None
    return qe.SearchParams(quantization=qe.QuantizationSearchParams(
        rescore=True, oversampling=OVERSAMPLING))


def _sparse(i: int) -> qe.SparseVector:
    return qe.SparseVector([i % 997, 1000 + i % 89, 2000 + i % 7], [1.0, 0.7, 0.3])


def _points(start: int, stop: int) -> list:
    vectors = _vectors(start, stop)
    return [qe.Point(i + 1, {DENSE: vectors[i - start].tolist(), SPARSE: _sparse(i)},
                     {"namespace": f"ns-{i % NAMESPACES}", "text": TEXT, "chunk_index": i % 20})
            for i in range(start, stop)]


def _ns_filter(ns: int):
    return qe.Filter(must=[qe.FieldCondition(key="namespace",
                                             match=qe.MatchValue(f"ns-{ns}"))])


def _dense(shard, layout: str, q: np.ndarray, flt=None, payload: bool = True):
    return shard.query(qe.QueryRequest(
        limit=LIMIT, query=qe.Query.Nearest(q.tolist(), using=DENSE), filter=flt,
        params=_params(layout), with_payload=payload, with_vector=False))


def _hybrid(shard, layout: str, q: np.ndarray, j: int, flt):
    prefetches = [
        qe.Prefetch(limit=LIMIT * 4, query=qe.Query.Nearest(q.tolist(), using=DENSE),
                    filter=flt, params=_params(layout)),
        qe.Prefetch(limit=LIMIT * 4, filter=flt,
                    query=qe.Query.Nearest(_sparse(j * 31), using=SPARSE))]
    return shard.query(qe.QueryRequest(limit=LIMIT, prefetches=prefetches,
                                       query=qe.Fusion.Rrf(k=60), filter=flt,
                                       with_payload=True, with_vector=False))


def _pct(times: list[float]) -> tuple[float, float]:
    times = sorted(times)
    return statistics.median(times), times[max(0, int(len(times) * 0.95) - 1)]


def _timed(fn, n: int) -> tuple[float, float, float]:
    """(p50 ms, p95 ms, load average) of ``fn(j)`` over ``n`` calls after 5 warm-ups."""
    for j in range(5):
        fn(j)
    times = []
    for j in range(n):
        t0 = time.perf_counter()
        fn(j)
        times.append((time.perf_counter() - t0) * 1000)
    return (*_pct(times), _load1())


def run_layout(layout: str, size: int, n_queries: int, seal_every: int,
               log=lambda m: print(m, file=sys.stderr)) -> dict:
    """Load, seal, search, reopen one layout; returns its figures."""
    workdir = Path(tempfile.mkdtemp(prefix=f"kbsync-layout-{layout}-"))
    folder = str(workdir / "shard")
    queries = _queries(n_queries)
    row: dict = {"layout": layout, "size": size}
    seals: list[float] = []
    try:
        shard = qe.EdgeShard.create(folder, _config(layout, seal_every))
        shard.update(qe.UpdateOperation.create_field_index(
            "namespace", qe.KeywordIndexParams(is_tenant=True)))
        spent, since_seal = 0.0, 0
        for start in range(0, size, BATCH):
            points = _points(start, min(start + BATCH, size))
            t0 = time.perf_counter()
            shard.update(qe.UpdateOperation.upsert_points(points))
            since_seal += len(points)
            if layout in ("m0", "m0_int8") and since_seal >= seal_every:
                shard.flush()
                t1 = time.perf_counter()
                shard.optimize()  # seals the appendable segment once it is over the threshold
                seals.append(time.perf_counter() - t1)
                since_seal = 0
            spent += time.perf_counter() - t0
            if (start // BATCH) % 100 == 99:
                log(f"{layout}: {start + BATCH:,} points, store {spent:.0f}s")
        shard.flush()
        if layout in ("m0_int8_end", "hnsw16"):
            t1 = time.perf_counter()
            shard.optimize()
            seals.append(time.perf_counter() - t1)
        row["upsert_pts_s"] = size / spent
        row["seal_max_s"] = max(seals) if seals else 0.0
        row["seal_total_s"] = sum(seals)
        row["seals"] = len(seals)
        row["seal_load"] = _load1()
        row["segments"] = shard.info().segments_count
        row["dense_all"] = _timed(lambda j: _dense(shard, layout, queries[j % n_queries]),
                                  n_queries)
        row["dense_ns"] = _timed(lambda j: _dense(shard, layout, queries[j % n_queries],
                                                  _ns_filter(j % NAMESPACES)), n_queries)
        row["hybrid_ns"] = _timed(lambda j: _hybrid(shard, layout, queries[j % n_queries], j,
                                                    _ns_filter(j % NAMESPACES)), n_queries)
        found = [{h.id for h in _dense(shard, layout, q, payload=False)} for q in queries]
        shard.close()
        t0 = time.perf_counter()
        shard = qe.EdgeShard.load(folder)
        assert shard.count(qe.CountRequest(exact=True)) == size
        _dense(shard, layout, queries[0])
        row["reopen"] = (time.perf_counter() - t0, _load1())
        shard.close()
        exact = exact_top(size, queries)
        row["recall10"] = statistics.fmean(len(f & e) / LIMIT for f, e in zip(found, exact))
        row["rss_peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return row


def _cell(value) -> str:
    if isinstance(value, list):  # a tuple once it has been through JSON
        value = tuple(value)
    if isinstance(value, tuple) and len(value) == 3:
        return f"{value[0]:.1f} / {value[1]:.1f} (load {value[2]:.1f})"
    if isinstance(value, tuple):
        return f"{value[0]:.2f} s (load {value[1]:.1f})"
    return "-" if value is None else str(value)


def print_layouts(rows: list[dict]) -> None:
    """The figures of every layout as one Markdown table."""
    print("| layout | points | upsert pts/s | seals: longest / total s (load) | segments "
          "| dense p50 / p95 ms | namespace 10% p50 / p95 ms | hybrid p50 / p95 ms | reopen "
          "| peak RSS MiB | recall@10 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        if row.get("skipped"):
            print(f"| {row['layout']} | {row['size']:,} | skipped: {row['skipped']} "
                  "| | | | | | | | |")
            continue
        print(f"| {row['layout']} | {row['size']:,} | {row['upsert_pts_s']:,.0f} "
              f"| {row['seal_max_s']:.2f} / {row['seal_total_s']:.2f} ({row['seals']} calls, "
              f"load {row['seal_load']:.1f}) | {row['segments']} | {_cell(row['dense_all'])} "
              f"| {_cell(row['dense_ns'])} | {_cell(row['hybrid_ns'])} | {_cell(row['reopen'])} "
              f"| {row['rss_peak_mb']:,.0f} | {row['recall10']:.4f} |")
