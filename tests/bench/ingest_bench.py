"""Ingest benchmark: the Prefect flow against the plain runner over the same share.

    python tests/bench/ingest_bench.py [--files 1000[,10000]] [--keep DIR]
    python tests/bench/ingest_bench.py --real octave-html:320 [--provider default]
    python tests/bench/ingest_bench.py --scale 10000,100000 [--keep DIR]

For each size, generates a share of mixed files (tests/bench/share_gen.py), then
in one run, each kind in its own fresh process and KBSYNC_HOME, with the
``hash`` provider and every other default:
- ``plain``: :func:`kbsync.ingest.runner.run_plain` (the runner in process, no Prefect);
- ``flow``: the ``ingest`` flow (the same runner, Prefect executor) under a local
  Prefect test server (server start-up and its first request excluded, as with a
  long-running server).
Both time the store's open and close.
Each kind runs twice: the first ingest, then a no-op re-run. Prints wall times,
files/s, peak RSS, and the flow/plain wall-time ratio. Not collected by pytest.

``--real NAME:N`` runs the same comparison on N files of a real share of
tests/realshares.py (Debian documentation, fetched once); ``--provider default``
leaves the embedding provider at its default (the bundled local model).

``--scale SIZES`` runs only the flow (hash provider) over text-only generated
shares (``share_gen.generate(office=False)``: Markdown where PDFs and DOCX would
be, so 100k files are written in minutes), each size in its own process, and
prints beside the targets of issue 15: peak RSS of the flow process (its own
``ru_maxrss``) and of its conversion workers (sampled every 0.5 s, summed; the
Prefect server's process is left out), the flow process's RSS at each quarter
of the first ingest (flat or growing), wall time, and the no-op re-run.
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
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parents[1])]


def _child(kind: str, share: str) -> None:
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    from kbsync.ingest.discover import parse_root

    if kind == "plain":
        from kbsync.runtime import Runtime
        from kbsync.ingest.runner import run_plain
        from kbsync.settings import Settings

        def plain() -> dict:  # the store is opened and closed inside the timing, as the flow's
            runtime = Runtime.open(Settings())
            try:
                return run_plain([parse_root(share)], runtime=runtime).to_dict()
            finally:
                runtime.close()

        runs = [_timed(plain) for _ in range(2)]
    else:
        from prefect.client.orchestration import get_client
        from prefect.testing.utilities import prefect_test_harness

        with prefect_test_harness(server_startup_timeout=300):
            from flows.ingest import ingest

            with get_client(sync_client=True) as client:  # a long-running server is warm
                client.hello()
            runs = [_timed(lambda: ingest(roots=[share])) for _ in range(2)]
            print(json.dumps({"phase": "done", "t": time.time()}), flush=True)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"first": runs[0], "noop": runs[1], "rss_mb": rss}))


def _timed(run) -> dict:
    print(json.dumps({"phase": "start", "t": time.time()}), flush=True)  # for --scale's sampler
    started = time.perf_counter()
    summary = run()
    return {"wall": time.perf_counter() - started, "summary": summary,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _flow_env(home: Path, provider: str = "hash") -> dict:
    """The environment of one run's process: its own KBSYNC_HOME and PREFECT_HOME."""
    env = {**os.environ, "KBSYNC_HOME": str(home), "PREFECT_HOME": str(home / "prefect")}
    env.pop("KBSYNC_EMBED_PROVIDER", None)
    if provider != "default":
        env["KBSYNC_EMBED_PROVIDER"] = provider
    (home / "prefect").mkdir(parents=True, exist_ok=True)
    return env


def _run(kind: str, share: Path, home: Path, provider: str = "hash") -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", kind, str(share)],
                         env=_flow_env(home, provider), capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", default="1000", help="share sizes, comma-separated")
    parser.add_argument("--keep", type=Path, default=None, help="generate the shares under here")
    parser.add_argument("--real", default=None, help="NAME:N, a real share instead")
    parser.add_argument("--provider", default="hash", help="hash (default here) or default")
    parser.add_argument("--scale", default=None, help="sizes: flow only, RSS vs targets")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(*args.child)
        return
    if args.scale:
        from ingest_scale import run_scale

        run_scale([int(s) for s in args.scale.split(",")], args.keep, _flow_env)
        return
    from share_gen import generate

    work = Path(tempfile.mkdtemp(prefix="kbsync-bench-"))
    print(f"{'files':>6} {'run':<6} {'first s':>8} {'files/s':>8} {'no-op s':>8} {'no-op %':>8} "
          f"{'peak RSS MB':>12} {'chunks':>7} {'failed':>6}")
    for size, share in _shares(args, work, generate):
        rows = {kind: _run(kind, share, work / f"{kind}-{size}", args.provider)
                for kind in ("plain", "flow")}
        for kind, row in rows.items():
            first, noop = row["first"], row["noop"]
            s = first["summary"]
            assert noop["summary"]["unchanged"] == s["files_seen"], noop["summary"]
            print(f"{size:>6} {kind:<6} {first['wall']:>8.1f} {s['files_seen'] / first['wall']:>8.1f} "
                  f"{noop['wall']:>8.2f} {100 * noop['wall'] / first['wall']:>7.1f}% "
                  f"{row['rss_mb']:>12.0f} {s['chunks_kept']:>7} {s['failed']:>6}")
        ratio = rows["flow"]["first"]["wall"] / rows["plain"]["first"]["wall"]
        print(f"{size:>6} flow / plain wall-time ratio (first ingest): {ratio:.2f}")


def _shares(args, work: Path, generate):
    """(label, folder) of each share to run: generated sizes, or one real share."""
    if args.real:
        from realshares import SPECS, build_share

        name, _, count = args.real.partition(":")
        share = (args.keep or work) / f"real-{name}-{count}"
        if not share.exists():
            build_share(SPECS[name], share, int(count) if count else None)
        yield sum(1 for p in share.rglob("*") if p.is_file()), share
        return
    for size in (int(s) for s in args.files.split(",")):
        share = (args.keep or work) / f"share-{size}"
        if not share.exists():
            generate(share, size)
        yield size, share


if __name__ == "__main__":
    main()
