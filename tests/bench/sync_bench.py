"""Sync benchmark: a first run and a no-op re-run over generated shares.

    python tests/bench/sync_bench.py [--sizes 1000,10000]

For each size, with the ``hash`` provider and the plain core loop (the flow adds
a fixed per-batch cost measured by ingest_bench.py): the first run's time, the
no-op re-run's time, their ratio (target < 5%), and in the re-run the number of
files hashed, converted (added + updated) and embeddings computed (target 0).
Not collected by pytest.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]


def _measure(share: Path, home: Path) -> tuple[float, float, dict]:
    import os

    from kbsync.ingest.discover import parse_root
    from kbsync.embed import clear_service_cache
    from kbsync.ingest.runner import run_plain
    from kbsync.runtime import Runtime
    from kbsync.settings import Settings

    os.environ.update(KBSYNC_HOME=str(home), KBSYNC_EMBED_PROVIDER="hash")
    clear_service_cache()
    runtime = Runtime.open(Settings())
    try:
        started = time.perf_counter()
        first = run_plain([parse_root(str(share))], runtime=runtime)
        first_s = time.perf_counter() - started
        started = time.perf_counter()
        second = run_plain([parse_root(str(share))], runtime=runtime)
        second_s = time.perf_counter() - started
    finally:
        runtime.close()
    assert first.failed == 0, first.failures[:3]
    return first_s, second_s, second.to_dict()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000")
    args = parser.parse_args()
    from share_gen import generate

    work = Path(tempfile.mkdtemp(prefix="kbsync-sync-bench-"))
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        share = generate(work / f"share{size}", size)
        first_s, second_s, rerun = _measure(share, work / f"home{size}")
        rows.append((size, first_s, second_s, rerun))
        print(f"done {size} files", flush=True)
    print(f"\n{'files':>6} {'first s':>8} {'no-op s':>8} {'ratio':>7} {'no-op ms/file':>14} "
          f"{'hashed':>7} {'converted':>9} {'embedded':>9}")
    for size, first_s, second_s, rerun in rows:
        print(f"{size:>6} {first_s:>8.1f} {second_s:>8.2f} {second_s / first_s:>7.1%} "
              f"{1000 * second_s / size:>14.3f} {rerun['files_hashed']:>7} "
              f"{rerun['added'] + rerun['updated']:>9} {rerun['embeddings_computed']:>9}")


if __name__ == "__main__":
    main()
