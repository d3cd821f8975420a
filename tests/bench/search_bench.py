"""Benchmark search latency per mode in the embedded engine (a script, not a test).

    python tests/bench/search_bench.py [--sizes 10000,100000] [--queries 200] [-k 5]

For each size a fresh edge store is loaded with ``size`` chunk-like points over
10 namespaces: a random unit dense vector (dim 384) and the BM25 sparse vector
of a ~120-word synthetic text (Zipf-distributed vocabulary of 5,000 words plus
rare error codes), written through ``EdgeStore.upsert`` in batches of 256.
Then, with the namespace filter of :func:`kbsync.query.search.namespace_filter`
(namespace + not ``embedding_failed``) and ``k * 4`` candidates:

- ``engine``: the store calls alone (``search``, or ``hybrid.fused_search``: dense and
  sparse queries fused as ``search()`` fuses them);
- ``search()``: :func:`kbsync.query.search.search` end to end (query embedding with
  the hash embedder, sparse encoding, merge, de-duplication, hits);
- ``old-chunk check (count)``: the exact count behind search's note about chunks
  older than the filter fields (:func:`kbsync.query.filters.stale_note`).

Each is measured unfiltered (namespace only) and with each query-time filter
(:mod:`kbsync.query.filters`) on top: ``root`` (1 of 2 roots: half the
namespace), ``path_prefix`` (a folder with ~1/8 of it), ``type`` (pdf: 1/5),
``since`` (the newest ~30%) and ``all`` four at once (~0.5%); the payload has
the fields and indexes of a real chunk collection (``build_points``,
``Runtime.ensure_collection``). ``x`` is the filtered p50 over the unfiltered
p50 of the same measure (target: at most 2).

Measured on the store as an ingest leaves it: edge collections build no HNSW
graph since issue 15 (``kbsync.store.edge.query.INDEXING_THRESHOLD_KB``), so
the former "after ``optimize()``" measure is gone. Latencies are p50/p95 over
``--queries`` queries (after 10 warm-up queries), in milliseconds. Any size
runs (``--sizes 1000000``); throughput, search during writes, reopen and RSS at
1M are ``store_bench.py --scale 1000000``.
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

from hybrid import fused_search  # tests/bench is on sys.path when run as a script

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
EPOCH = 1_700_000_000
FOLDERS = ("docs", "docs/api", "guide", "guide/howto", "notes", "reports", "specs", "misc")
TYPES = ("pdf", "html", "markdown", "docx", "text")
FILTERS = {  # name -> search() keyword arguments (see module docstring for selectivity)
    "none": {},
    "root": {"root": "root-1"},
    "path_prefix": {"path_prefix": "docs/api"},
    "type": {"types": "pdf"},
    "since": {"modified_since": "2024-01-23T22:13:20+00:00"},
    "all": {"root": "root-1", "path_prefix": "docs/api", "types": "pdf",
            "modified_since": "2024-01-23T22:13:20+00:00"},
}


class FixedDimService:
    """The query side of an embedding service: hash embeddings of the bench dimension."""

    def __init__(self) -> None:
        from kbsync.embed.hash import HashEmbedder

        self._embedder = HashEmbedder(DIM)
        self.dimension = DIM
        self.provider = self._embedder.provider
        self.model = self._embedder.model

    def query_dimension(self) -> int:
        return self.dimension

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
            doc = i // 20
            payload = {"namespace": ns, "doc_id": f"{ns}/doc-{doc}.md", "chunk_index": i % 20,
                       "text": text, "heading_path": "Chapter > Section", "page_start": None,
                       "page_end": None, "path": f"/data/{ns}/doc-{doc}.md",
                       "embedding_failed": False, **_filter_fields(doc)}
            points.append(Point(str(uuid.UUID(int=i + 1)), payload, vectors[offset].tolist(),
                                encode_document(text)))
        t0 = time.perf_counter()
        store.upsert(COLLECTION, points)
        spent += time.perf_counter() - t0
    return size / spent


def _filter_fields(doc: int) -> dict:
    """The filter payload of a chunk of document ``doc`` (as ``build_points`` writes it)."""
    from kbsync.catalog.schema import PAYLOAD_VERSION, folders_of

    rel = f"{FOLDERS[(doc // 7) % len(FOLDERS)]}/doc-{doc}.md"
    # modified spreads over 100 days in 1,000 steps, documents shuffled over them: "since"
    # keeps ~30% of the documents at every size.
    return {"root": f"root-{(doc // 3) % 2}", "rel_path": rel, "folders": folders_of(rel),
            "source_type": TYPES[doc % len(TYPES)],
            "modified": EPOCH + (doc * 7919) % 1000 * 8640, "payload_version": PAYLOAD_VERSION}


def _pct(times: list[float]) -> tuple[float, float]:
    times = sorted(times)
    return statistics.median(times), times[max(0, int(len(times) * 0.95) - 1)]


def measure(store, service, queries: list[str], k: int) -> dict[str, tuple[float, float]]:
    """p50/p95 ms per (level, mode, filter) over the queries."""
    from kbsync.query.filters import SearchFilters
    from kbsync.query.search import CANDIDATE_FACTOR, namespace_filter, search
    from kbsync.text.sparse import encode_query

    out: dict[str, tuple[float, float]] = {}
    vectors = [service.embed_query(q) for q in queries]
    for mode in ("dense", "hybrid"):
        for name, options in FILTERS.items():
            rnd = random.Random(7)  # the same namespaces for every filter
            filters = SearchFilters.build(**options)
            engine, full = [], []
            for n, (query, vector) in enumerate(zip(queries, vectors)):
                namespace = f"ns-{rnd.randrange(NAMESPACES)}"
                flt = filters.apply(namespace_filter(namespace, None))
                sparse = encode_query(query)
                t0 = time.perf_counter()
                if mode == "dense":
                    hits = store.search(COLLECTION, vector, limit=k * CANDIDATE_FACTOR, flt=flt)
                else:
                    hits = fused_search(store, COLLECTION, vector, sparse,
                                        limit=k * CANDIDATE_FACTOR, flt=flt)
                t1 = time.perf_counter()
                result = search(query, store=store, service=service, collection=COLLECTION,
                                namespace=namespace, k=k, mode=mode, **options)
                t2 = time.perf_counter()
                assert not result.notes, (name, result.notes)
                if name != "all":  # all four at once may leave fewer than k in small stores
                    assert len(result.results) == k, (name, len(result.results))
                if mode == "dense" and name != "all":
                    assert len(hits) == k * CANDIDATE_FACTOR
                assert all(h.payload["namespace"] == namespace for h in hits)
                _check_filtered(hits, filters)
                if n >= 10:  # warm-up
                    engine.append((t1 - t0) * 1000)
                    full.append((t2 - t1) * 1000)
            out[f"engine {mode} {name}"] = _pct(engine)
            out[f"search() {mode} {name}"] = _pct(full)
    out["old-chunk check (count) none"] = _count_cost(store, len(queries))
    return out


def _count_cost(store, n: int) -> tuple[float, float]:
    """p50/p95 ms of the exact count behind the old-chunk note (search() reuses a clean
    answer for ``CLEAN_TTL_S``, so the filtered search() rows pay it once per namespace)."""
    from kbsync.catalog.schema import PAYLOAD_VERSION
    from kbsync.query.filters import count_old
    from kbsync.query.search import namespace_filter

    times = []
    for i in range(n):
        flt = namespace_filter(f"ns-{i % NAMESPACES}", None)
        t0 = time.perf_counter()
        assert count_old(store, COLLECTION, flt, PAYLOAD_VERSION) == 0
        times.append((time.perf_counter() - t0) * 1000)
    return _pct(times[10:])


def _check_filtered(hits, filters) -> None:
    """Every hit satisfies every filter (the bench measures correct answers only)."""
    since = filters.modified_since.timestamp() if filters.modified_since else None
    for hit in hits:
        p = hit.payload
        assert not filters.root or p["root"] == filters.root
        assert not filters.path_prefix or filters.path_prefix in p["folders"]
        assert not filters.types or p["source_type"] in filters.types
        assert since is None or p["modified"] >= since


def run(size: int, n_queries: int, k: int) -> dict:
    """Load one store of ``size`` points and measure it."""
    from kbsync.store.edge.store import EdgeStore
    from kbsync.catalog.schema import CHUNK_BOOL_INDEXES, CHUNK_INDEXES, CHUNK_INTEGER_INDEXES

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
                                    sparse=True, bool_indexes=CHUNK_BOOL_INDEXES,
                                    integer_indexes=CHUNK_INTEGER_INDEXES)
            t0 = time.perf_counter()
            row["upsert_pts_s"] = load(store, size, rnd, words, weights)
            row["load_s"] = time.perf_counter() - t0
            service = FixedDimService()
            row["fresh"] = measure(store, service, queries, k)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return row


def print_rows(rows: list[dict], k: int) -> None:
    """A Markdown table: one line per size, state, measure and filter, with the ratio."""
    print(f"k={k} ({k * 4} candidates per search), namespace filter (1 of {NAMESPACES}) "
          "plus each query-time filter\n")
    print("| chunks | state | measure | filter | p50 ms | p95 ms | x unfiltered p50 |")
    print("|---:|---|---|---|---:|---:|---:|")
    for row in rows:
        for state in ("fresh",):
            for key, (p50, p95) in row[state].items():
                level, mode, name = key.rsplit(" ", 2)
                base = row[state][f"{level} {mode} none"][0]
                print(f"| {row['size']:,} | {state} | {level} {mode} | {name} | {p50:.2f} | "
                      f"{p95:.2f} | {p50 / base:.2f} |")
    print()
    for row in rows:
        print(f"{row['size']:,} chunks: load {row['load_s']:.0f}s (upsert "
              f"{row['upsert_pts_s']:,.0f} pts/s)")


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
