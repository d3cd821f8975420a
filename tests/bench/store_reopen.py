"""Reopen of the embedded store at scale: open + count + first search, with and without the
read-ahead of its flag files and int8 vectors (``kbsync.store.edge.check.warm_mapped_files``),
side by side in one run.

Builds (or reuses, with ``--keep DIR``) a store of ``--size`` chunk-like points as
``store_scale.py`` loads them (kbsync's sealed layout, the chunk collection's 8 payload
indexes, BM25 sparse vectors), then reopens it ``--rounds`` times per variant, alternating,
each reopen in a fresh process. Prints the median and range of each figure, the page faults
of the open, and the load average beside them.

    python tests/bench/store_reopen.py --size 1000000 --keep /tmp/reopen-1m
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
COLLECTION = "bench"


def build(folder: Path, size: int) -> float:
    """Load ``size`` points into a new store at ``folder``; returns the seconds it took."""
    import numpy as np
    import search_bench as sb
    import store_scale as ss
    from kbsync.catalog.schema import CHUNK_BOOL_INDEXES, CHUNK_INDEXES, CHUNK_INTEGER_INDEXES
    from kbsync.store.edge.store import EdgeStore

    words, weights = sb._vocabulary(random.Random(42))
    pool = ss.text_pool(random.Random(42), words, weights)
    rng = np.random.default_rng(42)
    started = time.perf_counter()
    with EdgeStore(folder) as store:
        store.ensure_collection(COLLECTION, dimension=ss.DIM, keyword_indexes=CHUNK_INDEXES,
                                sparse=True, bool_indexes=CHUNK_BOOL_INDEXES,
                                integer_indexes=CHUNK_INTEGER_INDEXES)
        for start in range(0, size, ss.BATCH):
            store.upsert(COLLECTION, ss._batch(start, min(start + ss.BATCH, size), rng, pool))
    return time.perf_counter() - started


def reopen(folder: Path, warm: bool) -> dict:
    """One reopen in this process: open + count, then the first namespace-filtered search."""
    import numpy as np
    from kbsync.query.search import namespace_filter
    from kbsync.store.edge import seal as edge_seal
    from kbsync.store.edge.store import EdgeStore

    spent: list[float] = []
    real_warm = edge_seal.warm_mapped_files

    def timed_warm(shard_folder: Path) -> tuple[int, float]:
        files, seconds = real_warm(shard_folder) if warm else (0, 0.0)
        spent.append(seconds)
        return files, seconds

    edge_seal.warm_mapped_files = timed_warm  # what load_shard calls
    query = np.random.default_rng(1).standard_normal(384).astype(np.float32)
    query /= np.linalg.norm(query)
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    store = EdgeStore(folder)
    count = store.count(COLLECTION)
    opened = time.perf_counter()
    store.search(COLLECTION, query.tolist(), limit=20, flt=namespace_filter("ns-3"))
    searched = time.perf_counter()
    after = resource.getrusage(resource.RUSAGE_SELF)
    # then a search over every point (a store of one namespace): it reads all int8 vectors
    store.search(COLLECTION, (-query).tolist(), limit=20)
    scanned = time.perf_counter()
    whole = resource.getrusage(resource.RUSAGE_SELF)
    store.close()
    return {"count": count, "open_s": opened - started, "warm_s": sum(spent),
            "first_search_s": searched - opened, "reopen_s": searched - started,
            "whole_search_s": scanned - searched,
            "whole_search_faults": whole.ru_majflt - after.ru_majflt,
            "major_faults": after.ru_majflt - before.ru_majflt,
            "minor_faults": after.ru_minflt - before.ru_minflt, "load": os.getloadavg()[0]}


def _child(folder: Path, warm: bool) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", str(folder), str(int(warm))],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _row(name: str, runs: list[dict], key: str, fmt: str) -> str:
    values = [r[key] for r in runs]
    return (f"| {name} | {fmt.format(statistics.median(values))} "
            f"({fmt.format(min(values))}-{fmt.format(max(values))}) |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--keep", type=Path, help="build the store here, or reuse it")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(reopen(Path(args.child[0]), bool(int(args.child[1])))))
        return 0
    import tempfile

    folder = args.keep or Path(tempfile.mkdtemp(prefix="kbsync-reopen-"))
    if not (folder / COLLECTION).exists():
        print(f"built {args.size:,} points in {build(folder, args.size):.0f} s", flush=True)
    runs: dict[bool, list[dict]] = {True: [], False: []}
    for _ in range(args.rounds):
        for warm in (False, True):
            runs[warm].append(_child(folder, warm))
    print(f"\n{runs[True][0]['count']:,} points, {args.rounds} reopens per variant, "
          "alternating, each in a fresh process; median (min-max)\n")
    for warm, name in ((False, "engine load only"), (True, "mapped files read ahead first (kbsync)")):
        print(f"**{name}**\n\n| figure | value |\n|---|---:|")
        for label, key, fmt in (("reopen: open + count + first search (s)", "reopen_s", "{:.2f}"),
                                ("of which open + count (s)", "open_s", "{:.2f}"),
                                ("of which first search (s)", "first_search_s", "{:.3f}"),
                                ("the warm-up itself (s, counted in the reopen)", "warm_s",
                                 "{:.2f}"),
                                ("major page faults", "major_faults", "{:,.0f}"),
                                ("then a search of every point (s)", "whole_search_s", "{:.3f}"),
                                ("its major page faults", "whole_search_faults", "{:,.0f}"),
                                ("minor page faults", "minor_faults", "{:,.0f}"),
                                ("load average (1 min)", "load", "{:.1f}")):
            print(_row(label, runs[warm], key, fmt))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
