"""``ingest_bench.py --scale``: the flow over text-only generated shares, RSS beside the targets.

Each size runs in its own process (``ingest_bench.py --child flow SHARE``: first
ingest, then a no-op re-run, under a local Prefect test server). This process
samples that one every 0.5 s with psutil: the flow process's RSS, and the summed
RSS of its descendants that are not the Prefect server (the conversion workers
and their forkserver). The flow's peak is its own ``ru_maxrss`` (exact); the
workers' peak is the largest sampled sum (a sample can miss a short spike).

RSS counts the pages of mapped files the process touched (the store's vectors, payloads
and indexes, which the kernel may drop when it needs the RAM) beside the process's own
memory. So the flow's RSS is also sampled split in two: anonymous (its own: RSS less the
file-backed and shared pages) and file-backed, each with its largest sample.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
RSS_RATIO_TARGET = 1.2  # peak RSS of the flow at the largest size / at the smallest
NOOP_TARGET_S = 30.0  # no-op re-run at 100k files


def run_scale(sizes: list[int], keep: Path | None, flow_env) -> None:
    """Generate (or reuse under ``keep``) each share, run the flow over it, print the table."""
    from share_gen import generate

    work = keep or Path(tempfile.mkdtemp(prefix="kbsync-scale-"))
    rows = {}
    for size in sizes:
        share = work / f"text-share-{size}"
        if not share.exists():
            started = time.perf_counter()
            generate(share, size, office=False)
            print(f"generated {size} files in {time.perf_counter() - started:.0f} s", flush=True)
        home = Path(tempfile.mkdtemp(prefix=f"flow-{size}-", dir=work))
        rows[size] = _sampled_run(share, flow_env(home))
        _print_row(size, rows[size])
    _print_targets(sizes, rows)


def _sampled_run(share: Path, env: dict) -> dict:
    """One child run, sampled; its JSON result plus the sampled RSS figures."""
    proc = subprocess.Popen([sys.executable, str(HERE / "ingest_bench.py"), "--child", "flow",
                             str(share)], env=env, stdout=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    nprocs: list[int] = []
    split: list[tuple[float, float]] = []
    samples = _sample(proc, nprocs, split)
    reader.join()
    if proc.wait():
        raise SystemExit(f"flow run over {share} exited {proc.returncode}")
    result = json.loads(lines[-1])
    starts = [json.loads(x)["t"] for x in lines if '"phase": "start"' in x]
    result["workers_mb"] = max((w for _, _, w in samples), default=0.0)
    result["quarters_mb"] = _quarters(samples, starts[0], starts[1])
    result["noop_max_mb"] = max((f for t, f, _ in samples if t >= starts[1]), default=0.0)
    result["procs"] = max((n for n in nprocs), default=0)
    result["anon_mb"] = max((a for a, _ in split), default=0.0)
    result["file_mb"] = max((f for _, f in split), default=0.0)
    return result


def _sample(proc: subprocess.Popen, nprocs: list[int],
            split: list[tuple[float, float]]) -> list[tuple[float, float, float]]:
    """(time, flow RSS MB, workers' RSS MB) every 0.5 s until ``proc`` ends; the number
    of worker processes of each sample goes to ``nprocs``, the flow's RSS as (anonymous,
    file-backed) MB to ``split``."""
    samples = []
    try:
        me = psutil.Process(proc.pid)
        while proc.poll() is None:
            info = me.memory_info()  # Linux: ``shared`` is RssFile + RssShmem
            flow, workers, count = info.rss, 0, 0
            split.append(((info.rss - info.shared) / 2**20, info.shared / 2**20))
            for child in me.children(recursive=True):
                try:
                    if not _is_server(child):
                        workers += child.memory_info().rss
                        count += 1
                except psutil.Error:  # the child ended between listing and reading
                    continue
            nprocs.append(count)
            samples.append((time.time(), flow / 2**20, workers / 2**20))
            time.sleep(0.5)
    except psutil.NoSuchProcess:
        pass
    return samples


def _is_server(child: psutil.Process) -> bool:
    """The Prefect test server (uvicorn) and anything under it."""
    for p in [child, *child.parents()]:
        if any("uvicorn" in part for part in p.cmdline()):
            return True
    return False


def _quarters(samples, start: float, end: float) -> list[float]:
    """The flow's RSS at 25/50/75/100% of the first ingest (the last sample before each)."""
    out = []
    for q in (0.25, 0.5, 0.75, 1.0):
        at = start + q * (end - start)
        before = [f for t, f, _ in samples if t <= at]
        out.append(before[-1] if before else 0.0)
    return out


def _print_row(size: int, row: dict) -> None:
    first, noop = row["first"], row["noop"]
    s = first["summary"]
    assert noop["summary"]["unchanged"] == s["files_seen"], noop["summary"]
    quarters = " / ".join(f"{q:.0f}" for q in row["quarters_mb"])
    print(f"{size:>7} files: first {first['wall']:.1f} s ({s['files_seen'] / first['wall']:.1f} "
          f"files/s, {s['chunks_kept']} chunks, {s['failed']} failed), no-op {noop['wall']:.2f} s; "
          f"peak RSS flow {row['rss_mb']:.0f} MB (by the end of the first ingest "
          f"{first['peak_mb']:.0f}; sampled in the no-op {row['noop_max_mb']:.0f}; sampled "
          f"peaks anonymous {row['anon_mb']:.0f} and file-backed {row['file_mb']:.0f}), workers "
          f"{row['workers_mb']:.0f} MB (summed RSS of up to {row['procs']} processes); flow RSS "
          f"at 1/4..4/4 of the first ingest {quarters} MB", flush=True)


def _print_targets(sizes: list[int], rows: dict) -> None:
    small, big = min(sizes), max(sizes)
    print(f"{'figure':<44} {'measured':>10} {'target':>10}")
    if small != big:
        ratio = rows[big]["rss_mb"] / rows[small]["rss_mb"]
        print(f"{f'peak RSS flow {big} / {small} files':<44} {ratio:>10.2f} "
              f"{f'<= {RSS_RATIO_TARGET}':>10}")
        first = rows[big]["first"]["peak_mb"] / rows[small]["first"]["peak_mb"]
        print(f"{'  the same, first ingest only':<44} {first:>10.2f} {'-':>10}")
        for part in ("anon", "file"):
            ratio = rows[big][f"{part}_mb"] / max(rows[small][f"{part}_mb"], 1.0)
            name = "anonymous" if part == "anon" else "file-backed"
            print(f"{f'  sampled peak, {name} only':<44} {ratio:>10.2f} {'-':>10}")
        wratio = rows[big]["workers_mb"] / max(rows[small]["workers_mb"], 1.0)
        print(f"{f'peak RSS workers {big} / {small} files':<44} {wratio:>10.2f} {'-':>10}")
    print(f"{f'no-op re-run, {big} files (s)':<44} {rows[big]['noop']['wall']:>10.2f} "
          f"{f'<= {NOOP_TARGET_S:.0f}':>10}")
