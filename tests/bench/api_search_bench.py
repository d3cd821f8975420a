"""Search latency through ``kbsync.api`` at 100,000 chunks (a script, not a test).

    python tests/bench/api_search_bench.py [--size 100000] [--queries 200] [-k 5]
        [--compare REF ...]

One embedded store under a temporary ``KBSYNC_HOME`` (hash embedder, 384 dims): one
``api.add_text`` writes the collection, its embedder record and the owner-only permission
profile; then ``--size`` chunk points of that profile are loaded straight into the store
(one namespace, ~120 Zipf words each, the payload of a real chunk), as
``search_bench.py`` loads them. Then, in a fresh process per code version (the working
tree, and each ``--compare`` git ref exported with ``git archive``), against the same
store:

- ``cold``: ``KnowledgeBase()`` plus its first search (store open, identity, profiles), s;
- ``engine dense`` / ``engine hybrid``: the store calls alone (``store.search`` with
  ``k * 4`` candidates; the hybrid's dense + sparse + fusion of
  :func:`kbsync.query.search.hybrid_candidates`);
- ``api dense`` / ``api hybrid``: ``KnowledgeBase.search`` end to end (query embedding,
  the embedder check, the reader's permission filter, the searches, payloads, merge,
  hits), p50 / p95 over ``--queries`` queries after 10 warm-up ones, ms.

Each row prints the 1-minute load average beside it (``os.getloadavg``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
DIM = 384
NAMESPACE = "bench"
BATCH = 1024
VOCAB = 5000
WORDS = 120


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KBSYNC_", "PREFECT_"))}
    env.update(KBSYNC_HOME=str(home), KBSYNC_EMBED_PROVIDER="hash",
               KBSYNC_EMBED_DIMENSIONS=str(DIM), KBSYNC_CONVERT_ISOLATION="false")
    return env


def _vocabulary(rnd: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = sorted({"".join(rnd.choice(letters) for _ in range(rnd.randint(3, 10)))
                    for _ in range(VOCAB * 2)})[:VOCAB]
    rnd.shuffle(words)
    return words


def build(home: Path, size: int) -> float:
    """The store of ``size`` chunks under ``home``; returns the seconds it took."""
    os.environ.update(_env(home))
    from kbsync import api
    from kbsync.catalog.schema import PAYLOAD_VERSION, folders_of
    from kbsync.settings import load_settings
    from kbsync.store import Point, open_store
    from kbsync.text.sparse import encode_document

    t0 = time.perf_counter()
    api.add_text("# Seed\n\nThe seed text of the bench namespace.", "seed", NAMESPACE)
    settings = load_settings()
    store = open_store(settings)
    try:
        seed = next(iter(store.scroll(settings.collection))).payload
        rnd = random.Random(42)
        words = _vocabulary(rnd)
        weights = [1.0 / (r + 1) for r in range(len(words))]
        rng = np.random.default_rng(42)
        for start in range(0, size, BATCH):
            stop = min(start + BATCH, size)
            vectors = rng.standard_normal((stop - start, DIM), dtype=np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            points = []
            for off, i in enumerate(range(start, stop)):
                text = " ".join(rnd.choices(words, weights=weights, k=WORDS))
                doc = i // 20
                rel = f"docs/d{doc % 50}/doc-{doc}.md"
                payload = {**seed, "doc_id": f"bench/{rel}", "root": "bench", "rel_path": rel,
                           "path": f"/data/{rel}", "chunk_index": i % 20, "text": text,
                           "heading_path": "Chapter > Section", "title": f"doc {doc}",
                           "source_type": "markdown", "folders": folders_of(rel),
                           "modified": 1_700_000_000 + doc, "payload_version": PAYLOAD_VERSION,
                           "embedding_failed": False}
                points.append(Point(str(uuid.UUID(int=i + 1)), payload,
                                    vectors[off].tolist(), encode_document(text)))
            store.upsert(settings.collection, points)
    finally:
        store.close()
    return time.perf_counter() - t0


def measure(n_queries: int, k: int) -> dict:
    """In this process (``KBSYNC_HOME`` set by the caller): cold, engine and api figures."""
    rnd = random.Random(42)
    words = _vocabulary(rnd)
    queries = [" ".join(rnd.choices(words[:2000], k=rnd.randint(2, 5))) for _ in range(n_queries)]
    t0 = time.perf_counter()
    from kbsync import api

    kb = api.KnowledgeBase()
    first = kb.search(queries[0], NAMESPACE, k=k)
    cold = time.perf_counter() - t0
    assert len(first.results) == k, first
    from kbsync.query.fusion import FUSION_DEPTH, fuse, fusion_for
    from kbsync.query.search import CANDIDATE_FACTOR, namespace_filter, reader_filter
    from kbsync.query.request import as_request

    runtime = kb._open(embed=True)
    store, service, coll = runtime.store, runtime.service, runtime.collection
    flt = reader_filter(store, coll, as_request(queries[0], namespace=NAMESPACE))
    sparse = runtime.sparse
    out: dict = {"cold_s": cold}
    for mode in ("dense", "hybrid"):
        engine, full = [], []
        for n, query in enumerate(queries):
            vector = service.embed_query(query)
            t1 = time.perf_counter()
            if mode == "dense":
                store.search(coll, vector, limit=k * CANDIDATE_FACTOR, flt=flt)
            else:
                weights = fusion_for(query, provider=service.provider, model=service.model,
                                     sparse=sparse.version)
                limit = k * CANDIDATE_FACTOR
                depth = max(limit, FUSION_DEPTH)
                dense = store.search(coll, vector, limit=depth, flt=flt, with_payload=False)
                lexical = store.sparse_search(coll, sparse.encode_query(query), limit=depth,
                                              flt=flt, with_payload=False)
                fused = fuse(dense, lexical, weights, limit=limit)
                store.payloads(coll, [p.id for p in fused])
            t2 = time.perf_counter()
            result = kb.search(query, NAMESPACE, k=k, mode=mode)
            t3 = time.perf_counter()
            assert len(result.results) == k and not result.notes, result
            if n >= 10:
                engine.append((t2 - t1) * 1000)
                full.append((t3 - t2) * 1000)
        out[f"engine {mode}"] = _pct(engine)
        out[f"api {mode}"] = _pct(full)
    kb.close()
    out["load"] = os.getloadavg()[0]
    return out


def _pct(times: list[float]) -> list[float]:
    times = sorted(times)
    return [statistics.median(times), times[max(0, int(len(times) * 0.95) - 1)]]


def _export(ref: str, into: Path) -> Path:
    """The tree of git ``ref`` under ``into`` (``git archive``)."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "kbsync"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _run_version(code: Path, home: Path, n_queries: int, k: int) -> dict:
    env = {**_env(home), "PYTHONPATH": str(code)}
    done = subprocess.run([sys.executable, __file__, "--measure", "--queries", str(n_queries),
                           "-k", str(k)], env=env, check=True, capture_output=True, text=True,
                          cwd=str(code))
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("-k", type=int, default=5)
    parser.add_argument("--compare", action="append", default=[],
                        help="a git ref to measure beside the working tree (repeatable)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="measure the versions in turn this many times")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.queries, args.k)))
        return 0
    work = Path(tempfile.mkdtemp(prefix="kbsync-api-search-"))
    try:
        home = work / "home"
        built = subprocess.run(
            [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r}); "
             f"sys.path.insert(0, {str(Path(__file__).parent)!r}); import api_search_bench as b;"
             f" from pathlib import Path; print(b.build(Path({str(home)!r}), {args.size}))"],
            env={**_env(home), "PYTHONPATH": str(ROOT)}, check=True, capture_output=True,
            text=True)
        print(f"{args.size:,} chunks loaded in {float(built.stdout.split()[-1]):.0f} s",
              file=sys.stderr)
        versions = {"working tree": ROOT}
        for ref in args.compare:
            versions[ref] = _export(ref, work / f"code-{len(versions)}")
        rows: dict[str, list[dict]] = {name: [] for name in versions}
        for _ in range(args.rounds):
            for name, code in versions.items():
                rows[name].append(_run_version(code, home, args.queries, args.k))
        print(f"{args.size:,} chunks in one namespace, k={args.k}, hash embedder ({DIM} dims), "
              f"p50 / p95 ms over {args.queries - 10} queries; cold = KnowledgeBase() plus "
              "the first search\n")
        print("| code | round | cold s | engine dense | api dense | engine hybrid | api hybrid "
              "| load |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for name, results in rows.items():
            for i, r in enumerate(results, 1):
                cells = " | ".join(f"{r[m][0]:.2f} / {r[m][1]:.2f}" for m in
                                   ("engine dense", "api dense", "engine hybrid", "api hybrid"))
                print(f"| {name} | {i} | {r['cold_s']:.2f} | {cells} | {r['load']:.2f} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
