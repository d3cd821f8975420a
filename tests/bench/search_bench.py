"""Benchmark search latency per mode in the embedded engine (a script, not a test).

    python tests/bench/search_bench.py [--sizes 10000,100000] [--queries 200] [-k 5]

For each size a fresh edge store is loaded with ``size`` chunk-like points over
10 namespaces: a random unit dense vector (dim 384) and the BM25 sparse vector
of a ~120-word synthetic text (Zipf-distributed vocabulary of 5,000 words plus
rare error codes), written through ``EdgeStore.upsert`` in batches of 256.
Then, with the namespace filter of :func:`kbsync.query.search.namespace_filter`
(namespace + not ``embedding_failed``) and ``k * 4`` candidates:

- ``engine``: the store call alone (``search`` / ``hybrid_search``);
- ``search()``: :func:`kbsync.query.search.search` end to end (query embedding with
  the hash embedder, sparse encoding, merge, de-duplication, hits).

Both are measured on the freshly loaded store and again after ``optimize()``
(HNSW build), which a bulk load may run. Latencies are p50/p95 over
``--queries`` queries (after 10 warm-up queries), in milliseconds.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a plain script from anywhere
    sys.path.insert(0, str(ROOT))

DIM = 384
NAMESPACES = 10
BATCH = 256
VOCAB = 5000
WORDS_PER_CHUNK = 120
COLLECTION = "bench"


class FixedDimService:
    """The query side of an embedding service: hash embeddings of the bench dimension."""

    def __init__(self) -> None:
        from kbsync.embed.hash import HashEmbedder

        self._embedder = HashEmbedder(DIM)
        self.dimension = DIM

    def embed_query(self, text: str) -> list[float]:
        return self._embedder.embed_one(text)


def _vocabulary(rnd: random.Random) -> tuple[list[str], list[float]]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = sorted({"".join(rnd.choice(letters) for _ in range(rnd.randint(3, 10)))
                    for _ in range(VOCAB * 2)})[:VOCAB]
    rnd.shuffle(words)
    weights = [1.0 / (rank + 1) for rank in range(len(words))]  # Zipf
    return words, weights


def _text(i: int, rnd: random.Random, words: list[str], weights: list[float]) -> str:
    body = rnd.choices(words, weights=weights, k=WORDS_PER_CHUNK)
    if i % 50 == 0:
        body.append(f"ERR_{i:06d}")  # a rare identifier now and then
    return " ".join(body)


def load(store, size: int, rnd: random.Random, words, weights) -> float:
    """Write ``size`` points; returns points per second (store time only)."""
    from kbsync.text.sparse import encode_document
    from kbsync.store import Point

    rng = np.random.default_rng(42)
    spent = 0.0
    for start in range(0, size, BATCH):
        stop = min(start + BATCH, size)
        vectors = rng.standard_normal((stop - start, DIM), dtype=np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        points = []
        for offset, i in enumerate(range(start, stop)):
            text = _text(i, rnd, words, weights)
            ns = f"ns-{i % NAMESPACES}"
            payload = {"namespace": ns, "doc_id": f"{ns}/doc-{i // 20}.md", "chunk_index": i % 20,
                       "text": text, "heading_path": "Chapter > Section", "page_start": None,
                       "page_end": None, "path": f"/data/{ns}/doc-{i // 20}.md",
                       "embedding_failed": False}
            points.append(Point(str(uuid.UUID(int=i + 1)), payload, vectors[offset].tolist(),
                                encode_document(text)))
        t0 = time.perf_counter()
        store.upsert(COLLECTION, points)
        spent += time.perf_counter() - t0
    return size / spent


def _pct(times: list[float]) -> tuple[float, float]:
    times = sorted(times)
    return statistics.median(times), times[max(0, int(len(times) * 0.95) - 1)]


def measure(store, service, queries: list[str], k: int) -> dict[str, tuple[float, float]]:
    """p50/p95 ms per (level, mode) over the queries."""
    from kbsync.query.search import CANDIDATE_FACTOR, namespace_filter, search
    from kbsync.text.sparse import encode_query

    rnd = random.Random(7)
    out: dict[str, tuple[float, float]] = {}
    vectors = [service.embed_query(q) for q in queries]
    for mode in ("dense", "hybrid"):
        engine, full = [], []
        for n, (query, vector) in enumerate(zip(queries, vectors)):
            namespace = f"ns-{rnd.randrange(NAMESPACES)}"
            flt = namespace_filter(namespace)
            sparse = encode_query(query)
            t0 = time.perf_counter()
            if mode == "dense":
                hits = store.search(COLLECTION, vector, limit=k * CANDIDATE_FACTOR, flt=flt)
            else:
                hits = store.hybrid_search(COLLECTION, vector, sparse, limit=k * CANDIDATE_FACTOR,
                                           flt=flt, candidate_limit=k * CANDIDATE_FACTOR)
            t1 = time.perf_counter()
            result = search(query, store=store, service=service, collection=COLLECTION,
                            namespace=namespace, k=k, mode=mode)
            t2 = time.perf_counter()
            assert len(hits) == k * CANDIDATE_FACTOR and len(result.results) == k
            assert all(h.payload["namespace"] == namespace for h in hits)
            if n >= 10:  # warm-up
                engine.append((t1 - t0) * 1000)
                full.append((t2 - t1) * 1000)
        out[f"engine {mode}"] = _pct(engine)
        out[f"search() {mode}"] = _pct(full)
    return out


def run(size: int, n_queries: int, k: int) -> dict:
    """Load one store of ``size`` points and measure it before and after optimize()."""
    from kbsync.store.edge import EdgeStore
    from kbsync.ingest.write import CHUNK_BOOL_INDEXES, CHUNK_INDEXES

    rnd = random.Random(42)
    words, weights = _vocabulary(rnd)
    queries = [" ".join(rnd.choices(words[:2000], k=rnd.randint(2, 5))) for _ in range(n_queries)]
    queries[::20] = [f"what does ERR_{50 * j:06d} mean" for j in range(len(queries[::20]))]
    workdir = Path(tempfile.mkdtemp(prefix="kbsync-search-bench-"))
    row: dict = {"size": size}
    try:
        with EdgeStore(workdir) as store:
            # The same collection layout as Runtime.ensure_collection.
            store.ensure_collection(COLLECTION, dimension=DIM, keyword_indexes=CHUNK_INDEXES,
                                    sparse=True, bool_indexes=CHUNK_BOOL_INDEXES)
            t0 = time.perf_counter()
            row["upsert_pts_s"] = load(store, size, rnd, words, weights)
            row["load_s"] = time.perf_counter() - t0
            service = FixedDimService()
            row["fresh"] = measure(store, service, queries, k)
            t0 = time.perf_counter()
            store.optimize()
            row["optimize_s"] = time.perf_counter() - t0
            row["optimized"] = measure(store, service, queries, k)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return row


def print_rows(rows: list[dict], k: int) -> None:
    """A Markdown table: one line per size, state and measure."""
    print(f"k={k} ({k * 4} candidates per search), namespace filter (1 of {NAMESPACES})\n")
    print("| chunks | state | measure | p50 ms | p95 ms |")
    print("|---:|---|---|---:|---:|")
    for row in rows:
        for state in ("fresh", "optimized"):
            for name, (p50, p95) in row[state].items():
                print(f"| {row['size']:,} | {state} | {name} | {p50:.2f} | {p95:.2f} |")
    print()
    for row in rows:
        print(f"{row['size']:,} chunks: load {row['load_s']:.0f}s (upsert "
              f"{row['upsert_pts_s']:,.0f} pts/s), optimize {row['optimize_s']:.1f}s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("-k", type=int, default=5)
    args = parser.parse_args(argv)
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        t0 = time.perf_counter()
        rows.append(run(size, args.queries, args.k))
        print(f"{size:,}: done in {time.perf_counter() - t0:.0f}s", file=sys.stderr)
    print_rows(rows, args.k)
    return 0


if __name__ == "__main__":
    sys.exit(main())
