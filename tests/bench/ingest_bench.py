"""Ingest benchmark: the Prefect flow against a plain loop over the same core functions.

    python tests/bench/ingest_bench.py [--files 1000] [--keep DIR]

Generates a share of ``--files`` mixed files (tests/bench/share_gen.py), then in
one run, each in its own fresh process and KBSYNC_HOME, with the ``hash``
provider:
- ``plain``: kbsync.ingest.runner.run_plain (no Prefect at all);
- ``flow``: the ``ingest`` flow under a local Prefect test server (server start-up
  is excluded from the timing, as with a long-running server).
Prints files/s, chunks/s, peak RSS and the flow/plain wall-time ratio.
Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]


def _child(kind: str, share: str) -> None:
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    from kbsync.ingest.discover import parse_root

    if kind == "plain":
        from kbsync.ingest.runner import run_plain
        from kbsync.app.runtime import Runtime
        from kbsync.settings import Settings

        runtime = Runtime.open(Settings())
        started = time.perf_counter()
        summary = run_plain([parse_root(share)], runtime=runtime).to_dict()
        wall = time.perf_counter() - started
        runtime.close()
    else:
        from prefect.testing.utilities import prefect_test_harness

        with prefect_test_harness(server_startup_timeout=300):
            from flows.ingest import ingest

            started = time.perf_counter()
            summary = ingest(roots=[share])
            wall = time.perf_counter() - started
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"wall": wall, "rss_mb": rss, "summary": summary}))


def _run(kind: str, share: Path, home: Path) -> dict:
    env = {**os.environ, "KBSYNC_HOME": str(home), "KBSYNC_EMBED_PROVIDER": "hash",
           "PREFECT_HOME": str(home / "prefect")}
    (home / "prefect").mkdir(parents=True, exist_ok=True)
    out = subprocess.run([sys.executable, __file__, "--child", kind, str(share)], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--keep", type=Path, default=None, help="generate the share here")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(*args.child)
        return
    from share_gen import generate

    work = Path(tempfile.mkdtemp(prefix="kbsync-bench-"))
    share = args.keep or work / "share"
    started = time.perf_counter()
    if not share.exists():
        generate(share, args.files)
    print(f"generated {args.files} files in {time.perf_counter() - started:.1f} s under {share}")
    rows = {kind: _run(kind, share, work / kind) for kind in ("plain", "flow")}
    print(f"\n{'run':<6} {'wall s':>8} {'files/s':>8} {'chunks/s':>9} {'peak RSS MB':>12} "
          f"{'files':>6} {'chunks':>7} {'failed':>6}")
    for kind, row in rows.items():
        s = row["summary"]
        print(f"{kind:<6} {row['wall']:>8.1f} {s['files_seen'] / row['wall']:>8.1f} "
              f"{s['chunks_kept'] / row['wall']:>9.1f} {row['rss_mb']:>12.0f} "
              f"{s['files_seen']:>6} {s['chunks_kept']:>7} {s['failed']:>6}")
    ratio = rows["flow"]["wall"] / rows["plain"]["wall"]
    print(f"\nflow / plain wall-time ratio: {ratio:.2f}")


if __name__ == "__main__":
    main()
