"""Where each second of a no-op sync goes (a script, not a test; issue 42).

    python tests/bench/noop_bench.py [--html 300] [--files 100000] [--server] [--runs 2]

Shares:

- ``html``: ``--html`` real HTML pages of Debian documentation packages that no eval set
  holds out: ``git-doc`` (``usr/share/doc/git-doc``), then ``debian-handbook`` en-US, from
  the cache of ``tests/realshares.py`` (``~/.cache/kbsync-real-shares/pkgs``; fetched there
  with ``apt-get download`` when missing);
- ``gen``: ``--files`` small generated files (``share_gen.generate``, no office files);
  ``--files 0`` skips it (its first ingest is the long part).

Each share is ingested once (``kbsync ingest NAME=PATH --json``, hash embedder, so the first
run embeds fast; a no-op loads no model either way), then each no-op (every file unchanged)
is measured ``--runs`` times in a child process, in each way of running:

- ``no API``: no ``PREFECT_API_URL`` (the CLI's choice for that case, today a temporary
  server: its start is inside the flow run; the flow run's difference to ``server`` is
  about its cost);
- ``server``: against one ``prefect server start`` this script starts (``--server``; its own
  start-up is not timed; ``PREFECT_HOME`` in a temporary folder).

Rows (seconds; ``load`` = 1-minute load average when the row was measured):

- ``python -c pass``, ``import kbsync``, ``kbsync --help``: interpreter start and imports,
  wall; ``importtime`` = the sum of the top-level imports' cumulative time that
  ``python -X importtime -m kbsync --help`` reports;
- ``no-op wall``: the whole command, process start included, nothing patched;
- then the same no-op run by this script's child (``--child``): it imports the CLI and the
  flow first (timed: ``imports``), wraps each function of :data:`PHASES` with a timer (wall
  seconds and calls, summed over the threads that call them; phases overlap), and runs
  ``kbsync ingest`` in process: store open (``open_store``), walk
  (``walk.iter_files``), state reads (``StateStore`` reads), plan (``plan.plan_root``),
  flow run (``run_flow_sync``), task runs (``run_task_sync``), artifacts
  (``tasks.artifacts``), close (``Runtime.close``); beside them the run's own
  ``duration_s`` and ``stage_s`` from its JSON summary. cProfile is no use here: it sees
  the main thread only, and the flow's tasks run in worker threads.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKGS = Path(os.environ.get("KBSYNC_REAL_SHARES_CACHE",
                           Path.home() / ".cache" / "kbsync-real-shares")) / "pkgs"
HTML_SOURCES = ("git-doc/usr/share/doc/git-doc", "debian-handbook/usr/share/doc/"
                "debian-handbook/html/en-US")
PY = sys.executable

# phase -> the functions whose wall time it is (module, attribute path); patched in the child
# before anything imports them, timed in whichever thread calls them (so the phases overlap:
# the plan includes the walk and the state reads, the flow run the task runs)
PHASES = {
    "store open": [("kbsync.store", "open_store")],
    "walk": [("kbsync.ingest.walk", "iter_files")],
    "state reads": [("kbsync.catalog.state", f"StateStore.{n}") for n in
                    ("load", "load_docs", "iter_records", "chunk_total", "get", "read_meta",
                     "count_meta")],
    "plan (walk, state reads incl.)": [("kbsync.ingest.plan", "plan_root")],
    "flow run": [("prefect.flow_engine", "run_flow_sync")],
    "task runs": [("prefect.task_engine", "run_task_sync")],
    "artifacts": [("tasks.artifacts", n) for n in
                  ("publish_summary", "start_progress", "report_progress", "publish_failures")],
    "close": [("kbsync.runtime", "Runtime.close")],
}


def child(out: Path, argv: list[str]) -> int:
    """Run ``kbsync ARGV`` in this process with every function of :data:`PHASES` timed;
    write ``{phase: [seconds, calls]}`` (plus imports and the whole) to ``out``."""
    import importlib
    import inspect
    import threading

    began = time.perf_counter()
    spent: dict[str, list[float]] = {phase: [0.0, 0] for phase in PHASES}
    lock = threading.Lock()

    def add(phase: str, seconds: float, calls: int) -> None:
        with lock:
            spent[phase][0] += seconds
            spent[phase][1] += calls

    def consumed(phase: str, items):
        while True:  # a generator's time is the time of its steps
            t0 = time.perf_counter()
            try:
                item = next(items)
            except StopIteration:
                add(phase, time.perf_counter() - t0, 0)
                return
            add(phase, time.perf_counter() - t0, 0)
            yield item

    def timer(phase: str, fn):
        def timed_call(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                result = fn(*args, **kwargs)
            finally:
                add(phase, time.perf_counter() - t0, 1)
            return consumed(phase, result) if inspect.isgenerator(result) else result
        return timed_call

    for phase, targets in PHASES.items():
        for module_name, attr in targets:
            module = importlib.import_module(module_name)
            owner, _, name = attr.rpartition(".")
            holder = getattr(module, owner) if owner else module
            setattr(holder, name, timer(phase, getattr(holder, name)))
    import kbsync.app.cli  # noqa: F401 - the CLI and what it imports at once
    import flows.ingest  # noqa: F401 - the flow the CLI imports when it runs

    imported = time.perf_counter()
    from kbsync.app.cli import main as cli_main

    sys.argv = ["kbsync", *argv]
    try:
        code = cli_main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    done = time.perf_counter()
    result = {phase: values for phase, values in spent.items()}
    result["imports (CLI, flows, prefect, engine)"] = [imported - began, 1]
    result["in process, after imports"] = [done - imported, 1]
    out.write_text(json.dumps(result))
    return int(code or 0)


def load() -> float:
    return os.getloadavg()[0]


def html_share(dest: Path, count: int) -> Path:
    """``count`` real HTML pages copied under ``dest`` (folders kept)."""
    pages: list[tuple[Path, Path]] = []
    for source in HTML_SOURCES:
        base = PKGS / source
        if not base.is_dir():
            sys.path.insert(0, str(ROOT / "tests"))
            import realshares  # noqa: F401 - fetches the packages (needs apt-get, root)

            raise SystemExit(f"{base} is missing: run tests/bench/real_shares.py --list once "
                             "to fetch the Debian packages")
        pages += [(base, p) for p in sorted(base.rglob("*.html"))]
    for base, page in pages[:count]:
        target = dest / base.parts[-1] / page.relative_to(base)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(page, target)
    return dest


def gen_share(dest: Path, files: int) -> Path:
    sys.path.insert(0, str(Path(__file__).parent))
    from share_gen import generate

    return generate(dest, files, office=False)


def env_for(home: Path, api_url: str | None, prefect_home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KBSYNC_", "PREFECT_"))}
    env.update(KBSYNC_HOME=str(home), KBSYNC_EMBED_PROVIDER="hash",
               PYTHONPATH=str(ROOT), PREFECT_HOME=str(prefect_home))
    if api_url:
        env["PREFECT_API_URL"] = api_url
    return env


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=str(ROOT))
    return time.perf_counter() - t0, done


def ingest_cmd(name: str, share: Path) -> list[str]:
    return [PY, "-m", "kbsync", "ingest", f"{name}={share}", "--json"]


def summary_of(done: subprocess.CompletedProcess) -> dict:
    start = done.stdout.find("{")
    if done.returncode not in (0, 3) or start < 0:
        raise SystemExit(f"ingest failed (exit {done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout[start:])


def importtime(env: dict[str, str]) -> float:
    done = subprocess.run([PY, "-X", "importtime", "-m", "kbsync", "--help"], env=env,
                          capture_output=True, text=True, cwd=str(ROOT))
    total = 0
    for line in done.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if m and len(m.group(3)) == 1:  # top-level imports only
            total += int(m.group(2))
    return total / 1e6


def start_server(prefect_home: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = env_for(prefect_home / "unused", None, prefect_home)
    proc = subprocess.Popen([PY, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                             "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/api"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url + "/health", timeout=2).read()
            return proc, url
        except OSError:
            time.sleep(0.5)
    proc.terminate()
    raise SystemExit("prefect server did not start within 120 s")


def measure_share(name: str, share: Path, work: Path, ways: dict[str, str | None],
                  runs: int, rows: list[tuple[str, str, str, float, float]]) -> None:
    home = work / f"home-{name}"
    prefect_home = work / "prefect"
    first_way = next(iter(ways.values()))
    wall, done = timed(ingest_cmd(name, share), env_for(home, first_way, prefect_home))
    s = summary_of(done)
    files = sum(1 for p in share.rglob("*") if p.is_file())
    rows.append((name, "first ingest", f"{files} files, {s.get('chunks_kept', '?')} chunks",
                 wall, load()))
    for way, url in ways.items():
        env = env_for(home, url, prefect_home)
        for run in range(1, runs + 1):
            wall, done = timed(ingest_cmd(name, share), env)
            summary = summary_of(done)
            rows.append((name, way, f"no-op wall (run {run}; "
                         f"{summary.get('unchanged', '?')} unchanged)", wall, load()))
        timing = work / f"{name}-{way.replace(' ', '_')}.json"
        wall, done = timed([PY, __file__, "--child", str(timing), "--"]
                           + ingest_cmd(name, share)[3:], env)
        summary = summary_of(done)
        rows.append((name, way, "no-op, phases timed (wall)", wall, load()))
        rows.append((name, way, "  run's own duration_s", float(summary["duration_s"]), load()))
        for stage, seconds in summary.get("stage_s", {}).items():
            rows.append((name, way, f"  run's stage_s {stage}", float(seconds), load()))
        for phase, (seconds, calls) in json.loads(timing.read_text()).items():
            rows.append((name, way, f"  {phase} ({calls} calls)", seconds, load()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--html", type=int, default=300)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--server", action="store_true", help="also against a running server")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        sys.path.insert(0, str(ROOT))
        return child(args.child, args.rest)
    work = args.work or Path(tempfile.mkdtemp(prefix="kbsync-noop-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    rows: list[tuple[str, str, str, float, float]] = []
    server = None
    try:
        env = env_for(work / "home-start", None, work / "prefect")
        for label, cmd in (("python -c pass", [PY, "-c", "pass"]),
                           ("import kbsync", [PY, "-c", "import kbsync"]),
                           ("import kbsync.api", [PY, "-c", "import kbsync.api"]),
                           ("kbsync --help", [PY, "-m", "kbsync", "--help"])):
            best = min(timed(cmd, env)[0] for _ in range(3))
            rows.append(("-", "start", f"{label} (best of 3)", best, load()))
        rows.append(("-", "start", "importtime: kbsync --help top-level imports", importtime(env),
                     load()))
        ways: dict[str, str | None] = {"no API": None}
        if args.server:
            server, url = start_server(work / "prefect")
            ways["server"] = url
        shares = []
        if args.html:
            shares.append(("html", html_share(work / "share-html", args.html)))
        if args.files:
            shares.append(("gen", gen_share(work / "share-gen", args.files)))
        for name, share in shares:
            measure_share(name, share, work, ways, args.runs, rows)
            print(f"{name}: measured", file=sys.stderr)
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print("| share | way | measure | seconds | load |")
    print("|---|---|---|---:|---:|")
    for share, way, what, seconds, avg in rows:
        print(f"| {share} | {way} | {what} | {seconds:.3f} | {avg:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
