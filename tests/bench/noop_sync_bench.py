"""No-op sync, before and after, side by side in one run (issue 42).

    python tests/bench/noop_sync_bench.py [--before DIR] [--after DIR] [--share octave-html:300]
        [--large 100000 | --large-dir DIR] [--repeat 2] [--work DIR] [--no-server]

Two shares: ``--share`` (a deterministic subset of a Debian documentation package,
tests/realshares.py; never a held-out package) and ``--large`` generated text files
(tests/bench/share_gen.py, ``office=False``; 0 leaves it out; ``--large-dir`` takes one made
before). Each share is ingested once into ``WORK/home-NAME`` (the ``--after`` code, no Prefect
API, ``KBSYNC_EMBED_PROVIDER=hash``, in-process conversion; skipped when that home holds
``first-ingest.json``: the first ingest is not what is measured); then every no-op re-run is the real ``python -m
kbsync ingest SHARE --json`` in a child process with the code of ``--before`` or ``--after``
first on its PYTHONPATH (e.g. ``git worktree add /tmp/main main``), alternating, ``--repeat``
times each:

* **no API**: no ``PREFECT_API_URL`` (a fresh ``PREFECT_HOME``): before, the temporary
  Prefect server; after, whatever the code does;
* **server**: against one ``prefect server start`` this script starts (its start-up is not
  timed; ``--no-server`` leaves these rows out).

Printed per row: the wall seconds of the child (process start, imports and exit included),
the run's own ``duration_s`` (its JSON summary: "in run"), the medians over the repeats, and
the 1-minute load average before each run (the machine is shared). Every run must report
every file unchanged, nothing added, updated or deleted, and exit 0. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(HERE.parent), str(ROOT)]

import real_shares  # noqa: E402
import realshares  # noqa: E402

PYTHON = sys.executable


def _env(code: Path, home: Path, prefect_home: Path, api: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KBSYNC_", "PREFECT_")) and k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(code), KBSYNC_HOME=str(home), KBSYNC_EMBED_PROVIDER="hash",
               PREFECT_HOME=str(prefect_home), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    if api:
        env["PREFECT_API_URL"] = api
    return env


def _ingest(code: Path, share: Path, home: Path, prefect_home: Path, api: str | None,
            extra: dict[str, str] | None = None) -> tuple[float, dict, str]:
    """One ``kbsync ingest SHARE --json`` child: wall seconds, summary, stderr tail."""
    env = {**_env(code, home, prefect_home, api), **(extra or {})}
    started = time.perf_counter()
    proc = subprocess.run([PYTHON, "-m", "kbsync", "ingest", str(share), "--json"], env=env,
                          cwd=str(code), capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - started
    try:
        summary = json.loads(proc.stdout)
    except ValueError:
        summary = {}
    if proc.returncode not in (0, 3) or not summary:
        raise SystemExit(f"run failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return wall, summary, proc.stderr[-300:]


FLOOR = """
import time
from prefect import flow
from prefect.artifacts import create_markdown_artifact


@flow(name="floor")
def floor():
    create_markdown_artifact(key="floor", markdown="nothing to do")


floor()
"""


def _floor(work: Path, api: str) -> tuple[float, float]:
    """Prefect's own floor: a child that imports Prefect and runs an empty flow writing one
    artifact against ``api``; its wall seconds and the 1-minute load before it."""
    load = os.getloadavg()[0]
    env = _env(ROOT, work, work / "prefect-floor", api)
    started = time.perf_counter()
    subprocess.run([PYTHON, "-c", FLOOR], env=env, capture_output=True, check=True, timeout=600)
    return time.perf_counter() - started, load


def _check_noop(summary: dict) -> None:
    """Nothing added, updated or deleted; every file unchanged or a remembered failure
    (a file that fails for its own bytes, reported again and not converted)."""
    remembered = summary.get("failed_remembered", 0)
    if summary["added"] or summary["updated"] or summary["deleted"] or \
            summary["failed"] != remembered or \
            summary["unchanged"] + remembered != summary["files_seen"]:
        keys = ("added", "updated", "deleted", "failed", "failed_remembered", "unchanged",
                "files_seen")
        raise SystemExit(f"not a no-op: { {k: summary[k] for k in keys} }")


def _real_share(work: Path, spec_text: str) -> Path:
    name, _, count = spec_text.partition(":")
    share = work / f"{name}-{count or 'all'}"
    if not share.exists():
        realshares.build_share(realshares.SPECS[name], share, int(count) if count else None)
    return share


def _large_share(work: Path, files: int) -> Path:
    share = work / f"text-share-{files}"
    if not share.exists():
        from share_gen import generate

        started = time.perf_counter()
        generate(share, files, office=False)
        print(f"generated {files} files in {time.perf_counter() - started:.0f} s", flush=True)
    return share


def _first_ingest(code: Path, share: Path, home: Path, work: Path) -> None:
    if (home / "first-ingest.json").exists():
        return
    shutil.rmtree(home, ignore_errors=True)
    wall, summary, _ = _ingest(code, share, home, work / "prefect-first", None,
                               {"KBSYNC_CONVERT_ISOLATION": "false"})
    print(f"first ingest of {share.name}: {summary['added']} added, {summary['failed']} failed, "
          f"{wall:.1f} s", flush=True)
    (home / "first-ingest.json").write_text(json.dumps(summary))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="checkout of the code before")
    parser.add_argument("--after", type=Path, default=ROOT, help="checkout after (this tree)")
    parser.add_argument("--share", default="octave-html:300")
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--large-dir", type=Path, default=None,
                        help="an existing large share instead of generating one")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--work", type=Path, default=None, help="kept between runs (shares, homes)")
    parser.add_argument("--no-server", action="store_true")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="kbsync-noop-"))
    work.mkdir(parents=True, exist_ok=True)
    shares = [_real_share(work, args.share)]
    if args.large_dir:
        shares.append(args.large_dir.resolve())
    elif args.large:
        shares.append(_large_share(work, args.large))
    server = api = None
    if not args.no_server:
        (work / "prefect-server").mkdir(exist_ok=True)
        server, api = real_shares.start_prefect_server(work / "prefect-server")
        print(f"prefect server at {api}", flush=True)
    rows: list[tuple] = []
    floors: list[tuple[float, float]] = []
    try:
        if api:
            floors = [_floor(work, api) for _ in range(args.repeat)]
        for share in shares:
            home = work / f"home-{share.name}"
            _first_ingest(args.after, share, home, work)
            files = json.loads((home / "first-ingest.json").read_text())["files_seen"]
            for where in ([None] if args.no_server else [None, api]):
                for label, code in (("before", args.before), ("after", args.after)):
                    walls, runs, loads = [], [], []
                    for _ in range(args.repeat):
                        loads.append(os.getloadavg()[0])
                        prefect_home = Path(tempfile.mkdtemp(prefix="ph-", dir=work))
                        wall, summary, _ = _ingest(code, share, home, prefect_home, where)
                        _check_noop(summary)
                        walls.append(wall)
                        runs.append(summary["duration_s"])
                        shutil.rmtree(prefect_home, ignore_errors=True)
                    row = (share.name, files, "server" if where else "no API", label,
                           statistics.median(walls), statistics.median(runs), walls, runs, loads)
                    rows.append(row)
                    _print_row(row)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
    print("\n| share | files | Prefect | code | no-op wall s (median) | in run s (median) "
          "| runs: wall / in run | load avg 1 min |\n|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(_markdown(row))
    if floors:
        print(f"\nPrefect's floor against the server (import Prefect, an empty flow run writing one "
              f"artifact, exit): {', '.join(f'{w:.2f} s (load {x:.1f})' for w, x in floors)}")


def _print_row(row: tuple) -> None:
    share, files, where, label, wall, run, walls, runs, loads = row
    print(f"{share} ({files} files) {where:7} {label:6}: wall {wall:.2f} s, in run {run:.2f} s "
          f"(walls {', '.join(f'{w:.2f}' for w in walls)}; load {', '.join(f'{x:.1f}' for x in loads)})",
          flush=True)


def _markdown(row: tuple) -> str:
    share, files, where, label, wall, run, walls, runs, loads = row
    each = "; ".join(f"{w:.2f} / {r:.2f}" for w, r in zip(walls, runs))
    return (f"| {share} | {files:,} | {where} | {label} | {wall:.2f} | {run:.2f} | {each} | "
            f"{', '.join(f'{x:.1f}' for x in loads)} |")


if __name__ == "__main__":
    main()
