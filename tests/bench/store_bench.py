"""Benchmark the vector store adapters side by side (a script, not a test).

    python tests/bench/store_bench.py [--sizes 10000,100000] [--local-max 20000]

For each size and adapter (``edge``: qdrant-edge-py; ``local``: qdrant-client
local mode) a fresh child process loads ``size`` random unit vectors (dim 384,
10 namespaces, chunk-like payloads) in upsert batches of 256, then measures
namespace-filtered search latency over 200 queries, the time to close and
reopen the store (open + first count + first search), and its memory. (Edge
collections build no HNSW graph: since issue 23 their segments seal every
``kbsync.store.layout.SEAL_EVERY`` points, inside the upsert; see ``--layouts``.)
Each case runs in its own process so peak RSS belongs to that case alone.
Local mode is skipped above ``--local-max`` points (it commits every point to
sqlite; 100k takes many minutes), and the table says so.

    python tests/bench/store_bench.py --scale 1000000

runs the scale case instead (``store_scale.py``): the chunk collection layout with
sparse vectors, a reader thread searching during the load, dense and hybrid
filtered search, reopen and peak RSS, printed beside issue 15's targets.
``--memory-cap MIB`` runs it in a memory cgroup of MIB (``memory_cap.py``): whether
the million-chunk store fits the cap, and what the cap costs.

    python tests/bench/store_bench.py --layouts 100000 [--seal-every 50000]

compares the engine's segment layouts side by side (``store_layouts.py``: today's
appendable segment, m=0 sealed, m=0 + int8 with rescoring, sealed every N points or at
the end, HNSW m=16 up to 100k): seal cost, dense and hybrid p50/p95, reopen, peak RSS and
recall@10 against exact search, with the load average beside each figure.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
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
if str(ROOT) not in sys.path:  # run as a plain script from anywhere
    sys.path.insert(0, str(ROOT))

DIM = 384
NAMESPACES = 10
BATCH = 256
QUERIES = 200
LIMIT = 10
COLLECTION = "bench"
LAYOUT_SEAL_EVERY = 50_000  # --layouts without --seal-every
WORDS = ("vector store chunk document policy invoice contract section table figure "
         "quarterly report revenue customer support release note install config").split()


def _rss_mb() -> tuple[float, float]:
    """(current RSS, peak RSS) of this process in MiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    try:
        import psutil  # optional

        return psutil.Process().memory_info().rss / 2**20, peak
    except ImportError:
        with open("/proc/self/statm") as fh:
            pages = int(fh.read().split()[1])
        return pages * resource.getpagesize() / 2**20, peak


def _dir_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def _payload(i: int, rnd: random.Random) -> dict:
    ns = f"ns-{i % NAMESPACES}"
    doc = i // 20
    return {
        "namespace": ns,
        "doc_id": f"{ns}/docs/file-{doc}.pdf",
        "chunk_index": i % 20,
        "text": " ".join(rnd.choice(WORDS) for _ in range(220)),
        "title": f"File {doc}",
        "path": f"/data/{ns}/docs/file-{doc}.pdf",
        "page": 1 + (i % 20) // 3,
        "heading_path": ["Chapter 1", f"Section {i % 7}"],
        "source_type": "pdf",
        "content_hash": uuid.uuid5(uuid.NAMESPACE_OID, str(doc)).hex,
        "embed_model": "all-MiniLM-L6-v2",
    }


def _open(kind: str, path: Path):
    if kind == "edge":
        from kbsync.store.edge.store import EdgeStore

        return EdgeStore(path)
    from kbsync.store.server.store import ServerStore

    return ServerStore.local(path)


def _search_ms(store, queries: np.ndarray, rnd: random.Random) -> tuple[float, float]:
    from kbsync.store import Filter

    times = []
    for q in queries:
        flt = Filter.where(namespace=f"ns-{rnd.randrange(NAMESPACES)}")
        t0 = time.perf_counter()
        hits = store.search(COLLECTION, q.tolist(), limit=LIMIT, flt=flt)
        times.append((time.perf_counter() - t0) * 1000)
        assert len(hits) == LIMIT
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.95) - 1]


def run_case(kind: str, size: int) -> dict:
    """Load, search, reopen one adapter at one size; returns the measures."""
    from kbsync.store import Point

    rng = np.random.default_rng(42)
    rnd = random.Random(42)
    vectors = rng.standard_normal((size, DIM), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = rng.standard_normal((QUERIES, DIM), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    workdir = Path(tempfile.mkdtemp(prefix=f"kbsync-bench-{kind}-"))
    out: dict = {"kind": kind, "size": size}
    try:
        store = _open(kind, workdir)
        store.ensure_collection(COLLECTION, dimension=DIM, keyword_indexes=("namespace", "doc_id"))
        spent = 0.0
        for start in range(0, size, BATCH):
            stop = min(start + BATCH, size)
            points = [Point(str(uuid.UUID(int=i + 1)), _payload(i, rnd), vectors[i].tolist())
                      for i in range(start, stop)]
            t0 = time.perf_counter()  # time the store, not the payload generation
            store.upsert(COLLECTION, points)
            spent += time.perf_counter() - t0
        out["upsert_pts_s"] = size / spent
        assert store.count(COLLECTION) == size
        out["search_p50_ms"], out["search_p95_ms"] = _search_ms(store, queries, rnd)
        out["rss_loaded_mb"], _ = _rss_mb()
        store.close()
        t0 = time.perf_counter()
        store = _open(kind, workdir)
        assert store.count(COLLECTION) == size
        store.search(COLLECTION, queries[0].tolist(), limit=LIMIT)
        out["reopen_s"] = time.perf_counter() - t0
        store.close()
        out["rss_now_mb"], out["rss_peak_mb"] = _rss_mb()
        out["disk_mb"] = _dir_mb(workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return out


COLUMNS = [
    ("adapter", "kind", "{}"), ("points", "size", "{:,}"),
    ("upsert pts/s", "upsert_pts_s", "{:,.0f}"),
    ("search p50 ms", "search_p50_ms", "{:.2f}"), ("p95 ms", "search_p95_ms", "{:.2f}"),
    ("reopen s", "reopen_s", "{:.2f}"),
    ("RSS loaded MiB", "rss_loaded_mb", "{:.0f}"), ("RSS peak MiB", "rss_peak_mb", "{:.0f}"),
    ("disk MiB", "disk_mb", "{:.0f}"),
]


def print_table(rows: list[dict]) -> None:
    """Print the measures as a Markdown table ('-' where not measured)."""
    print("| " + " | ".join(c[0] for c in COLUMNS) + " |")
    print("|" + "|".join("---" for _ in COLUMNS) + "|")
    for row in rows:
        cells = []
        for _, key, fmt in COLUMNS:
            value = row.get(key)
            cells.append("-" if value is None else fmt.format(value))
        if row.get("skipped"):
            cells[2] = f"skipped: {row['skipped']}"
        print("| " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--adapters", default="edge,local")
    parser.add_argument("--local-max", type=int, default=20000,
                        help="skip local mode above this many points")
    parser.add_argument("--scale", type=int, metavar="N",
                        help="run only the scale case at N points (edge; see store_scale.py)")
    parser.add_argument("--queries", type=int, default=QUERIES, help="searches per measure")
    parser.add_argument("--layouts", type=int, metavar="N",
                        help="compare the engine's segment layouts at N points (store_layouts.py)")
    parser.add_argument("--layout-names", default="appendable,m0,m0_int8,m0_int8_end,hnsw16")
    parser.add_argument("--seal-every", type=int, default=None,
                        help=f"points per sealed segment: in the layouts compared (default "
                             f"{LAYOUT_SEAL_EVERY:,}), and with --scale instead of "
                             "kbsync.store.layout.SEAL_EVERY")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="with --scale: build the store in this new folder and keep it "
                             "(reopen it with store_reopen.py --keep DIR)")
    parser.add_argument("--memory-cap", type=int, metavar="MIB",
                        help="with --scale: run the case in a memory cgroup of MIB (root; "
                             "see memory_cap.py) and print what it was charged")
    parser.add_argument("--one", nargs=2, metavar=("KIND", "SIZE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:  # child process: one case, JSON on stdout
        if args.one[0].startswith("layout:"):
            from store_layouts import run_layout

            print(json.dumps(run_layout(args.one[0].split(":", 1)[1], int(args.one[1]),
                                        args.queries, args.seal_every)))
        elif args.one[0] == "scale":
            from store_scale import run_scale

            if args.seal_every:  # before the store is made: its thresholds derive from it
                from kbsync.store import layout  # what the edge adapter reads at call time

                layout.SEAL_EVERY = args.seal_every
            print(json.dumps(run_scale(int(args.one[1]), args.queries, keep=args.keep)))
        else:
            print(json.dumps(run_case(args.one[0], int(args.one[1]))))
        return 0
    if args.scale:
        return _scale(args.scale, args.queries, args.keep, args.memory_cap, args.seal_every)
    if args.layouts:
        return _layouts(args.layouts, args.layout_names.split(","), args.queries,
                        args.seal_every or LAYOUT_SEAL_EVERY)
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        for kind in args.adapters.split(","):
            if kind == "local" and size > args.local_max:
                rows.append({"kind": kind, "size": size,
                             "skipped": f"local mode over --local-max {args.local_max}"})
                print(f"skipped local mode at {size:,} points (over --local-max)", file=sys.stderr)
                continue
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, __file__, "--one", kind, str(size)],
                                  capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                print(proc.stderr, file=sys.stderr)
                rows.append({"kind": kind, "size": size, "skipped": f"failed rc={proc.returncode}"})
                continue
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(f"{kind} {size:,}: done in {time.perf_counter() - t0:.0f}s", file=sys.stderr)
    print_table(rows)
    return 0


def _layouts(size: int, layouts: list[str], queries: int, seal_every: int) -> int:
    """Each layout in its own child process (so each peak RSS is its own), one table."""
    from store_layouts import HNSW_MAX, print_layouts

    rows = []
    for layout in layouts:
        if layout == "hnsw16" and size > HNSW_MAX:
            rows.append({"layout": layout, "size": size,
                         "skipped": f"graph build ~100x the seal; only up to {HNSW_MAX:,}"})
            continue
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, __file__, "--one", f"layout:{layout}", str(size),
                               "--queries", str(queries), "--seal-every", str(seal_every)],
                              stdout=subprocess.PIPE, text=True, check=False)
        if proc.returncode != 0:
            rows.append({"layout": layout, "size": size, "skipped": f"failed rc={proc.returncode}"})
            continue
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(f"{layout} {size:,}: done in {time.perf_counter() - t0:.0f}s", file=sys.stderr)
    print(f"{size:,} points, dim {DIM}, {NAMESPACES} namespaces, sealed every {seal_every:,} "
          f"points; {queries} queries per figure\n")
    print_layouts(rows)
    print(f"\nload average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


def _scale(size: int, queries: int, keep: Path | None = None, cap_mib: int | None = None,
           seal_every: int | None = None) -> int:
    """The scale case in a child process (so its peak RSS is the store's alone), in a
    memory cgroup of ``cap_mib`` when given, sealing every ``seal_every`` points when given."""
    from memory_cap import run_capped
    from store_scale import print_scale

    t0 = time.perf_counter()
    cmd = [sys.executable, __file__, "--one", "scale", str(size), "--queries", str(queries)]
    cmd += ["--keep", str(keep)] if keep else []
    cmd += ["--seal-every", str(seal_every)] if seal_every else []
    options = {"stdout": subprocess.PIPE, "text": True, "check": False}  # progress: stderr
    if cap_mib:
        proc, cap = run_capped(cmd, cap_mib, **options)
        print(f"memory cap {cap['cap_mib']:,} MiB: the cgroup's peak charge "
              f"{cap['cgroup_peak_mib']:,} MiB (anonymous and page cache), "
              f"{cap['oom_kills']} processes killed for memory", file=sys.stderr)
    else:
        proc = subprocess.run(cmd, **options)
    if proc.returncode != 0:
        print(f"scale case failed rc={proc.returncode}", file=sys.stderr)
        return proc.returncode
    print_scale(json.loads(proc.stdout.strip().splitlines()[-1]))
    print(f"\nwall time of the run: {time.perf_counter() - t0:.0f}s; load average at the end: "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
