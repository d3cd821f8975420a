"""The 1M-chunk case of ``store_bench.py --scale N`` (a script helper, not a test).

One child process loads ``N`` chunk-like points into a fresh embedded store (the
chunk collection layout of ``Runtime.ensure_collection``: keyword, bool and range
indexes, the IDF sparse vector) and measures, against issue 15's targets:

- bulk upsert throughput over the whole load (store time, and wall time with the
  point generation), and the slowest 10% window of it (is it *sustained*?);
- search p50/p95 of a reader thread that runs namespace-filtered dense and
  hybrid searches during the load (one search every ``READER_PAUSE_S``; the
  relay serves other processes' readers from a thread of the writer the same way),
  and the longest wait of one, timed from when it was due (:func:`_reader`);
- namespace-filtered dense and hybrid search p50/p95 on the loaded store
  (``namespace_filter``: namespace + not ``embedding_failed``; ``LIMIT`` results,
  hybrid with ``LIMIT`` candidates per prefetch, as ``search()`` asks for k=5);
- reopen (open + first count + first search) and peak RSS of the process;
- the seals (issue 23): how many, the longest single one (the engine holds the GIL for
  it), and recall@10 of unfiltered dense search against exact search (the load's vectors
  replayed from its seed, streamed: nothing kept);
- the 1-minute load average beside the load and the search figures.

Points are generated batch by batch (nothing kept), with search_bench's payload,
text and sparse vectors (the texts from a pool: see :func:`text_pool`). ``optimize()`` is not called (kbsync never calls it on
the ingest path): the figures are those of the store as an ingest leaves it.
"""

from __future__ import annotations

import logging
import os
import random
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from hybrid import fused_search  # tests/bench is on sys.path when run as a script

import numpy as np
import search_bench as sb
from store_bench import DIM, NAMESPACES, _dir_mb, _rss_mb

COLLECTION = "bench"
BATCH = 1024  # one engine update call (EdgeStore._WRITE_BATCH)
LIMIT = 20  # search() asks for k * CANDIDATE_FACTOR = 20 at k=5
READER_PAUSE_S = 0.05
WINDOW = 10  # throughput windows over the load
TEXT_POOL = 8192


def _pct(times: list[float]) -> tuple[float, float]:
    if not times:
        return float("nan"), float("nan")
    times = sorted(times)
    return statistics.median(times), times[max(0, int(len(times) * 0.95) - 1)]


def _major_faults() -> int:
    """This process's major page faults so far: mapped pages that were not in the page cache.
    Read from the disk, or (holes of new sparse files, as seals write) filled with zeros; a
    search or reopen phase with many ran disk-bound (this VM's DAMON reclaim drops idle
    cache pages)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_majflt


def _rss_split() -> str:
    """Anonymous / file-backed RSS now (the engine maps its files; both count in RSS)."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    anon, mapped = (int(fields[k].split()[0]) / 1024 for k in ("RssAnon", "RssFile"))
    return f"anon {anon:.0f} + file {mapped:.0f} MiB"


def text_pool(rnd, words, weights) -> list[tuple[str, object]]:
    """``TEXT_POOL`` (text, BM25 sparse vector) pairs, used in turn by the points.

    Generating and encoding a text per point took two thirds of the load's wall time
    on the busy machine; the store sees the same shapes either way (dense vectors
    stay unique; texts repeat every ``TEXT_POOL`` points, which only makes IDF flatter).
    """
    from kbsync.text.sparse import encode_document

    texts = [sb._text(i, rnd, words, weights) for i in range(TEXT_POOL)]
    return [(t, encode_document(t)) for t in texts]


def _batch(start: int, stop: int, rng, pool) -> list:
    from kbsync.store import Point

    vectors = rng.standard_normal((stop - start, DIM), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    points = []
    for offset, i in enumerate(range(start, stop)):
        text, sparse = pool[i % len(pool)]
        ns = f"ns-{i % NAMESPACES}"
        doc = i // 20
        payload = {"namespace": ns, "doc_id": f"{ns}/doc-{doc}.md", "chunk_index": i % 20,
                   "text": text, "heading_path": "Chapter > Section", "page_start": None,
                   "page_end": None, "path": f"/data/{ns}/doc-{doc}.md", "title": f"Doc {doc}",
                   "content_hash": uuid.uuid5(uuid.NAMESPACE_OID, str(doc)).hex,
                   "embedding_failed": False, **sb._filter_fields(doc)}
        points.append(Point(str(uuid.UUID(int=i + 1)), payload, vectors[offset].tolist(),
                            sparse))
    return points


class _Queries:
    """Unit dense query vectors, sparse queries and namespaces, cycled."""

    def __init__(self, n: int, words: list[str]) -> None:
        from kbsync.text.sparse import encode_query

        rng = np.random.default_rng(7)
        rnd = random.Random(7)
        dense = rng.standard_normal((n, DIM), dtype=np.float32)
        dense /= np.linalg.norm(dense, axis=1, keepdims=True)
        self.items = [(dense[j].tolist(),
                       encode_query(" ".join(rnd.choices(words[:2000], k=rnd.randint(2, 5)))),
                       f"ns-{rnd.randrange(NAMESPACES)}") for j in range(n)]

    def run(self, store, j: int, mode: str) -> float:
        """One namespace-filtered search; returns its latency in ms."""
        from kbsync.query.search import namespace_filter

        dense, sparse, ns = self.items[j % len(self.items)]
        flt = namespace_filter(ns, None)
        t0 = time.perf_counter()
        if mode == "dense":
            hits = store.search(COLLECTION, dense, limit=LIMIT, flt=flt)
        else:
            hits = fused_search(store, COLLECTION, dense, sparse, limit=LIMIT, flt=flt)
        took = (time.perf_counter() - t0) * 1000
        assert all(h.payload["namespace"] == ns for h in hits)
        return took


class _SealLog(logging.Handler):
    """Collects the wall and CPU seconds of every seal the store logs (``edge.seal.seal``)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.seconds: list[float] = []
        self.cpu: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("edge collection") and "sealed a segment" in \
                record.getMessage():
            self.seconds.append(float(record.args[1]))  # type: ignore[index]
            self.cpu.append(float(record.args[2]))  # type: ignore[index]


def _recall(store, size: int, n: int = 50) -> float:
    """Recall@10 of unfiltered dense search against exact search over the load's vectors."""
    rng_q = np.random.default_rng(11)
    queries = rng_q.standard_normal((n, DIM), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    rng = np.random.default_rng(42)  # the load's generator, replayed batch by batch
    best_s = np.full((n, 10), -np.inf, dtype=np.float32)
    best_i = np.zeros((n, 10), dtype=np.int64)
    for start in range(0, size, BATCH):
        stop = min(start + BATCH, size)
        vectors = rng.standard_normal((stop - start, DIM), dtype=np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        all_s = np.concatenate([best_s, queries @ vectors.T], axis=1)
        all_i = np.concatenate([best_i, np.broadcast_to(np.arange(start + 1, stop + 1),
                                                        (n, stop - start))], axis=1)
        top = np.argpartition(-all_s, 9, axis=1)[:, :10]
        best_s = np.take_along_axis(all_s, top, axis=1)
        best_i = np.take_along_axis(all_i, top, axis=1)
    found = [{int(uuid.UUID(h.id)) for h in store.search(COLLECTION, q.tolist(), limit=10)}
             for q in queries]
    return statistics.fmean(len(f & set(row.tolist())) / 10 for f, row in zip(found, best_i))


def _reader(store, queries: _Queries, stop: threading.Event, out: dict) -> None:
    """Searches in turn, each due ``READER_PAUSE_S`` after the last ended. ``out[mode]``: each
    search's own time; ``out["waits"]``: from when each was due to when it answered, so a
    stall that began while the reader slept (a seal holding the GIL) counts in full: what a
    request arriving then would wait (issue 42: "no search waits more than 2 s")."""
    j = 0
    due = time.perf_counter()
    while not stop.is_set():
        mode = "dense" if j % 2 == 0 else "hybrid"
        out[mode].append(queries.run(store, j, mode))
        ended = time.perf_counter()
        out["waits"].append((ended - due) * 1000)
        j += 1
        due = ended + READER_PAUSE_S
        stop.wait(READER_PAUSE_S)


def _load(store, size: int, pool, log) -> dict:
    rng = np.random.default_rng(42)
    spent, windows, window_spent = 0.0, [], 0.0
    step = max(BATCH, size // WINDOW)
    t_wall = time.perf_counter()
    for start in range(0, size, BATCH):
        points = _batch(start, min(start + BATCH, size), rng, pool)
        t0 = time.perf_counter()
        store.upsert(COLLECTION, points)
        took = time.perf_counter() - t0
        spent += took
        window_spent += took
        done = min(start + BATCH, size)
        if done % step < BATCH or done == size:
            windows.append((done, window_spent))
            log(f"{done:,} points: store {spent:.0f}s, wall {time.perf_counter() - t_wall:.0f}s, "
                f"RSS {_rss_split()}")
            window_spent = 0.0
    sizes = [b - a for a, b in zip([0] + [w[0] for w in windows], [w[0] for w in windows])]
    return {"upsert_pts_s": size / spent, "load_wall_s": time.perf_counter() - t_wall,
            "load_store_s": spent,
            "upsert_min_window_pts_s": min(n / s for n, (_, s) in zip(sizes, windows) if s)}


def run_scale(size: int, n_queries: int = 200, log=lambda m: print(m, file=sys.stderr),
              keep: Path | None = None) -> dict:
    """Load ``size`` points with a reader thread running, then measure; see module doc.
    ``keep``: build the store in this new folder and leave it there (for ``store_reopen.py
    --keep``, which reopens it in fresh processes); otherwise a temporary folder, removed."""
    from kbsync.catalog.schema import CHUNK_BOOL_INDEXES, CHUNK_INDEXES, CHUNK_INTEGER_INDEXES
    from kbsync.store.edge.store import EdgeStore

    words, weights = sb._vocabulary(random.Random(42))
    queries = _Queries(n_queries, words)
    pool = text_pool(random.Random(42), words, weights)
    if keep is not None:
        keep.mkdir(parents=True)  # a new folder: never load into (or remove) an existing one
    workdir = keep or Path(tempfile.mkdtemp(prefix="kbsync-scale-bench-"))
    from kbsync.store import layout  # read now: store_bench.py --seal-every may have set it

    row: dict = {"kind": "edge", "size": size, "seal_every": layout.SEAL_EVERY}
    t_case = time.perf_counter()
    try:
        store = EdgeStore(workdir)
        store.ensure_collection(COLLECTION, dimension=DIM, keyword_indexes=CHUNK_INDEXES,
                                sparse=True, bool_indexes=CHUNK_BOOL_INDEXES,
                                integer_indexes=CHUNK_INTEGER_INDEXES)
        during: dict = {"dense": [], "hybrid": [], "waits": []}
        stop = threading.Event()
        faults = _major_faults()
        reader = threading.Thread(target=_reader, args=(store, queries, stop, during))
        reader.start()
        seals = _SealLog()
        logging.getLogger("kbsync.store.edge.seal").addHandler(seals)
        logging.getLogger("kbsync.store.edge.seal").setLevel(logging.INFO)
        try:
            row.update(_load(store, size, pool, log))
        finally:
            stop.set()
            reader.join()
        row["load_loadavg"] = os.getloadavg()[0]
        row["majflt_load"] = _major_faults() - faults
        row["seals"] = len(seals.seconds)
        row["seal_max_s"] = max(seals.seconds, default=0.0)
        row["seal_max_cpu_s"] = max(seals.cpu, default=0.0)
        row["seal_mean_cpu_s"] = statistics.fmean(seals.cpu) if seals.cpu else 0.0
        row["during_n"] = len(during["dense"]) + len(during["hybrid"])
        row["during_dense_p50_ms"], row["during_dense_p95_ms"] = _pct(during["dense"])
        row["during_hybrid_p50_ms"], row["during_hybrid_p95_ms"] = _pct(during["hybrid"])
        row["during_p95_ms"] = _pct(during["dense"] + during["hybrid"])[1]
        row["during_wait_max_ms"] = max(during["waits"], default=0.0)
        assert store.count(COLLECTION) == size
        row["segments"] = store._require(COLLECTION).shard.info().segments_count  # no public API
        faults = _major_faults()
        for mode in ("dense", "hybrid"):
            times = [queries.run(store, j, mode) for j in range(n_queries + 10)][10:]
            row[f"{mode}_p50_ms"], row[f"{mode}_p95_ms"] = _pct(times)
        row["search_loadavg"] = os.getloadavg()[0]
        row["majflt_search"] = _major_faults() - faults
        row["recall10"] = _recall(store, size)
        row["rss_loaded_mb"] = _rss_mb()[0]
        t0 = time.perf_counter()
        store.close()
        row["close_s"] = time.perf_counter() - t0
        t0, faults = time.perf_counter(), _major_faults()
        store = EdgeStore(workdir)
        assert store.count(COLLECTION) == size
        queries.run(store, 0, "dense")
        row["reopen_s"] = time.perf_counter() - t0
        row["majflt_reopen"] = _major_faults() - faults
        row["reopen_loadavg"] = os.getloadavg()[0]
        times = [queries.run(store, j, "dense") for j in range(50)]
        row["reopened_dense_p50_ms"] = _pct(times)[0]
        store.close()
        row["rss_now_mb"], row["rss_peak_mb"] = _rss_mb()
        row["disk_mb"] = _dir_mb(workdir)
    finally:
        if keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
    row["case_s"] = time.perf_counter() - t_case
    return row


TARGETS = [  # (figure, key, format, target text, passes)
    ("bulk upsert, store time (pts/s)", "upsert_pts_s", "{:,.0f}", ">= 5,000",
     lambda v: v >= 5000),
    ("bulk upsert, slowest tenth of the load (pts/s)", "upsert_min_window_pts_s", "{:,.0f}",
     ">= 5,000", lambda v: v >= 5000),
    ("load wall time incl. point generation (s)", "load_wall_s", "{:.0f}", "-", None),
    ("dense search p50 / p95 (ms)", ("dense_p50_ms", "dense_p95_ms"), "{:.1f}", "<= 20 / 50",
     lambda a, b: a <= 20 and b <= 50),
    ("hybrid search p50 / p95 (ms)", ("hybrid_p50_ms", "hybrid_p95_ms"), "{:.1f}", "<= 30 / 60",
     lambda a, b: a <= 30 and b <= 60),
    ("recall@10 of dense search against exact", "recall10", "{:.4f}", ">= 0.99",
     lambda v: v >= 0.99),
    ("seals during the load / longest one (s)", ("seals", "seal_max_s"), "{:.4g}", "- / <= 2",
     lambda n, s: s <= 2),
    ("  CPU of a seal: longest / mean (s)", ("seal_max_cpu_s", "seal_mean_cpu_s"), "{:.2f}",
     "-", None),
    ("search p95 during the load, dense + hybrid (ms)", "during_p95_ms", "{:.1f}", "<= 100",
     lambda v: v <= 100),
    ("longest wait of a search during the load, from when it was due (ms)", "during_wait_max_ms",
     "{:,.0f}", "<= 2,000", lambda v: v <= 2000),
    ("  of which dense p50 / p95 (ms)", ("during_dense_p50_ms", "during_dense_p95_ms"), "{:.1f}",
     "-", None),
    ("  of which hybrid p50 / p95 (ms)", ("during_hybrid_p50_ms", "during_hybrid_p95_ms"),
     "{:.1f}", "-", None),
    ("reopen: open + count + first search (s)", "reopen_s", "{:.2f}", "<= 2", lambda v: v <= 2),
    ("peak RSS of the process (MiB)", "rss_peak_mb", "{:,.0f}", "<= 2,048", lambda v: v <= 2048),
    ("load average (1 min): after the load / searches / reopen",
     ("load_loadavg", "search_loadavg", "reopen_loadavg"), "{:.1f}", "-", None),
    ("major page faults (pages not cached): load / searches / reopen",
     ("majflt_load", "majflt_search", "majflt_reopen"), "{:,}", "-", None),
    ("RSS after the load (MiB)", "rss_loaded_mb", "{:,.0f}", "-", None),
    ("segments after the load", "segments", "{}", "-", None),
    ("close (flush) (s)", "close_s", "{:.1f}", "-", None),
    ("disk (MiB)", "disk_mb", "{:,.0f}", "-", None),
]


def print_scale(row: dict) -> None:
    """The figures beside issue 15's and 23's targets, one Markdown table."""
    print(f"{row['size']:,} chunks, dim {DIM}, {NAMESPACES} namespaces, sparse vectors, sealed "
          f"every {row.get('seal_every', 0):,} points; {row.get('during_n', 0)} searches during "
          f"the load; case took {row['case_s']:.0f}s\n")
    print("| figure | measured | target | met |")
    print("|---|---:|---:|---|")
    for label, key, fmt, target, check in TARGETS:
        keys = key if isinstance(key, tuple) else (key,)
        values = [row.get(k) for k in keys]
        if any(v is None for v in values):
            print(f"| {label} | - | {target} | - |")
            continue
        met = "-" if check is None else ("yes" if check(*values) else "**no**")
        print(f"| {label} | {' / '.join(fmt.format(v) for v in values)} | {target} | {met} |")
