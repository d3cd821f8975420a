"""What the read relay costs (a script, not a test).

    python tests/bench/relay_bench.py [--points 10000] [--queries 300] [--files 300]

1. Search latency, p50/p95 over ``--queries`` namespace-filtered dense and
   hybrid searches (limit 20, chunk-like payloads, dim 384) on ``--points``
   points: directly in this process, then through the relay of a child
   process holding the same store (idle, then while it upserts).
2. Writer slowdown: the child upserts 20k new points in batches of 256 (the
   store side of an ingest) with no reader, then while this process searches
   back-to-back through its relay (medians of ``--repeat`` alternating pairs).
3. Ingest slowdown: the child runs kbsync's plain ingest (hash embeddings,
   in-process conversion, ``force``) of ``--files`` generated files, without
   and with a reader searching back-to-back.

The reader and the writer share the machine's cores, so 2 and 3 include CPU
contention, not only the store's locks.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from hybrid import fused_search  # tests/bench is on sys.path when run as a script

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a plain script from anywhere
    sys.path.insert(0, str(ROOT))

DIM, LIMIT, BATCH, NAMESPACES = 384, 20, 256, 10
WORDS = ("vector store chunk document policy invoice contract section table figure "
         "quarterly report revenue customer support release note install config").split()


def _points(rng: np.random.Generator, count: int, start: int = 0) -> list:
    from kbsync.text.sparse import encode_document
    from kbsync.store.base import Point

    vectors = rng.normal(size=(count, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    out = []
    for i, vec in enumerate(vectors, start):
        words = [WORDS[(i * 7 + j) % len(WORDS)] for j in range(80)]
        text = " ".join(words)
        out.append(Point(id=str(uuid.UUID(int=i + 1)), vector=vec.tolist(),
                         sparse=encode_document(text),
                         payload={"namespace": f"ns{i % NAMESPACES}", "doc_id": f"d/{i}",
                                  "text": text, "embedding_failed": False}))
    return out


def _open_loaded(path: Path, points: int):
    from kbsync.store.edge.store import EdgeStore

    return _load(EdgeStore(path), points)


def _load(store, points: int):
    store.ensure_collection("bench", dimension=DIM, keyword_indexes=("namespace",),
                            sparse=True, bool_indexes=("embedding_failed",))
    if store.count("bench") < points:
        rng = np.random.default_rng(1)
        for start in range(0, points, 1024):
            store.upsert("bench", _points(rng, min(1024, points - start), start))
    return store


# --- child: holds the store and serves --------------------------------------------------------
def child(home: Path, points: int) -> None:
    """Commands on stdin: ``write`` (upsert 20k points, print seconds), ``ingest SHARE``
    (plain ingest, print seconds), ``quit``. Opens the store as the ingest flow does."""
    from kbsync.ingest.discover import parse_root
    from kbsync.ingest.runner import run_plain
    from kbsync.runtime import Runtime
    from kbsync.settings import Settings

    runtime = Runtime.open(Settings(home=home, embed_provider="hash", convert_isolation=False,
                                    qdrant_url=None), serve_readers=True)
    store = _load(runtime.store, points)
    print("ready", flush=True)
    rng = np.random.default_rng(2)
    for round_ in range(1, 10**6):
        cmd = sys.stdin.readline().split() or ["quit"]
        started = time.perf_counter()
        if cmd[0] == "write":  # fresh ids each time: inserts, as an ingest of new files
            batch = _points(rng, 20_000, round_ * 10**6)
            started = time.perf_counter()
            for i in range(0, len(batch), BATCH):
                store.upsert("bench", batch[i:i + BATCH])
        elif cmd[0] == "ingest":
            run_plain([parse_root(cmd[1])], runtime=runtime, force=True)
        else:
            break
        print(f"{time.perf_counter() - started:.3f}", flush=True)
    runtime.close()


# --- parent: reads -------------------------------------------------------------------------
def _queries(count: int) -> list:
    from kbsync.text.sparse import encode_query

    rng = np.random.default_rng(3)
    qs = rng.normal(size=(count, DIM)).astype(np.float32)
    qs /= np.linalg.norm(qs, axis=1, keepdims=True)
    return [(q.tolist(), encode_query(" ".join(random.Random(i).sample(WORDS, 3))))
            for i, q in enumerate(qs)]


def _search_once(store, q, hybrid: bool) -> float:
    from kbsync.store.base import Filter

    flt = Filter.where(namespace="ns3", embedding_failed=False)
    started = time.perf_counter()
    if hybrid:
        fused_search(store, "bench", q[0], q[1], limit=LIMIT, flt=flt, depth=LIMIT * 2)
    else:
        store.search("bench", q[0], limit=LIMIT, flt=flt)
    return (time.perf_counter() - started) * 1000


def _latency(store, queries, hybrid: bool) -> tuple[float, float]:
    times = sorted(_search_once(store, q, hybrid) for q in queries)
    return statistics.median(times), times[int(len(times) * 0.95) - 1]


def _while(proc, command: str, store, queries) -> tuple[float, list[float]]:
    """Send ``command``; search back-to-back until it answers. (seconds, latencies ms)."""
    answer: list[str] = []
    reader = threading.Thread(target=lambda: answer.append(proc.stdout.readline()))
    proc.stdin.write(command + "\n")
    proc.stdin.flush()
    reader.start()
    times, i = [], 0
    while reader.is_alive():
        if store is not None:
            times.append(_search_once(store, queries[i % len(queries)], hybrid=i % 2 == 1))
            i += 1
        else:
            time.sleep(0.01)
    return float(answer[0]), sorted(times)


def _paired(proc, command: str, store, queries, repeat: int) -> tuple[float, float, list]:
    """Median seconds of ``command`` alone and with a reader, after one warm-up run,
    alternating so that background load hits both alike; the reader's latencies."""
    _while(proc, command, None, queries)
    alone, shared, times = [], [], []
    for _ in range(repeat):
        alone.append(_while(proc, command, None, queries)[0])
        seconds, lat = _while(proc, command, store, queries)
        shared.append(seconds)
        times += lat
    return statistics.median(alone), statistics.median(shared), sorted(times)


def _share(root: Path, files: int) -> Path:
    rng = random.Random(5)
    for i in range(files):
        path = root / f"d{i % 10}" / f"f{i}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        body = "\n\n".join(f"## S{s}\n\n" + " ".join(rng.choice(WORDS) for _ in range(150))
                           for s in range(4))
        path.write_text(f"# Doc {i}\n\n{body}\n", encoding="utf-8")
    return root


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--files", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=3, help="alone/with-reader pairs per case")
    args = ap.parse_args()
    from kbsync.store.edge.relay import socket_path
    from kbsync.store.edge.relay_client import RelayStore

    work = Path(tempfile.mkdtemp(prefix="relay-bench-"))
    home, share = work / "home", _share(work / "share", args.files)
    queries = _queries(args.queries)
    direct = _open_loaded(home / "qdrant", args.points)  # measured first: same 10k points
    direct_rows = [("direct: dense", *_latency(direct, queries, False)),
                   ("direct: hybrid", *_latency(direct, queries, True))]
    direct.close()
    proc = subprocess.Popen([sys.executable, __file__, "--child", str(home), str(args.points)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    relay = RelayStore.connect(home / "qdrant", socket_path(home, home / "qdrant"))
    rows = direct_rows + [("relay, idle writer: dense", *_latency(relay, queries, False)),
                          ("relay, idle writer: hybrid", *_latency(relay, queries, True))]
    alone, shared, times = _paired(proc, "write", relay, queries, args.repeat)
    rows.append(("relay while upserting (dense+hybrid)", statistics.median(times),
                 times[int(len(times) * 0.95) - 1]))
    ingest_alone, ingest_shared, itimes = _paired(proc, "ingest " + str(share), relay, queries,
                                                  args.repeat)
    relay.close()
    proc.stdin.write("quit\n")
    proc.stdin.flush()
    proc.wait(timeout=120)
    print(f"\n{args.points} points (more written meanwhile), dim {DIM}, limit {LIMIT}, "
          f"{os.cpu_count()} cores\n")
    print("| search | p50 ms | p95 ms |\n|---|---|---|")
    for name, p50, p95 in rows:
        print(f"| {name} | {p50:.2f} | {p95:.2f} |")
    print(f"\nupsert 20k points: {alone:.2f} s alone, {shared:.2f} s with a reader searching "
          f"back-to-back ({len(times)} searches served, +{(shared / alone - 1) * 100:.0f}%)")
    print(f"plain ingest of {args.files} files: {ingest_alone:.2f} s alone, {ingest_shared:.2f} s "
          f"with a reader ({len(itimes)} searches, p50 {statistics.median(itimes):.2f} ms, "
          f"+{(ingest_shared / ingest_alone - 1) * 100:.0f}%)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(Path(sys.argv[2]), int(sys.argv[3]))
    else:
        main()
