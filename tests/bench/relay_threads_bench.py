"""Searches a second through an ingest's read relay from many threads, by the number of
connections one ``RelayStore`` may open (issue 40; a script, not a test).

    python tests/bench/relay_threads_bench.py [--work DIR] [--files 12000] [--threads 8]
        [--seconds 12] [--rounds 4] [--connections 1,4]

What ``kbsync serve`` does during an ingest, in one process: a home under ``WORK`` (hash
embedder) seeded with 3,000 API texts, then a real ``kbsync ingest SHARE --force`` of
``--files`` generated Markdown files (~7 chunks each) in a child, holding the store and serving
its relay. Meanwhile one ``KnowledgeBase`` (so one ``RelayStore``) is searched (hybrid, k=5) by
``--threads`` threads for ``--seconds`` a turn, the turns taking the ``--connections`` values in
turn (``kbsync.store.edge.relay_client.CONNECTIONS`` set before each), ``--rounds`` times, so each
value meets the same phases of the ingest. Printed per turn: searches a second, p50 and p95 ms,
errors, the 1-minute load average before it, and whether the ingest was still running at its
end (a turn after the ingest ended reads the folder directly and is not comparable).
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORDS = ("alpha beta gamma delta kernel module driver memory page cache socket thread lock "
         "file").split()


def _text(seed: int, words: int) -> str:
    rnd = random.Random(seed)
    return " ".join(rnd.choice(WORDS) + str(rnd.randint(0, 50)) for _ in range(words))


def _prepare(work: Path, files: int) -> Path:
    from kbsync import api

    home, share = work / "home", work / "share"
    if not (home / "seeded").exists():
        with api.KnowledgeBase() as kb:
            for i in range(3000):
                kb.add_text(_text(i, 400), f"seed/{i}")
        (home / "seeded").write_text("1")
    share.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        path = share / f"f{i}.md"
        if not path.exists():
            path.write_text("# F\n\n" + "\n\n".join(_text(10**6 + i * 7 + k, 120)
                                                    for k in range(7)))
    return share


def _turn(threads: int, seconds: float, ingest: subprocess.Popen) -> tuple[float, list, int]:
    from kbsync import api

    kb = api.KnowledgeBase()
    latencies: list[float] = []
    errors = [0]
    stop = time.monotonic() + seconds
    queries = itertools.count()

    def client() -> None:
        rnd = random.Random(next(queries))
        while time.monotonic() < stop and ingest.poll() is None:
            query = " ".join(rnd.choice(WORDS) for _ in range(3))
            started = time.perf_counter()
            try:
                kb.search(query, mode="hybrid", k=5)
            except Exception as exc:  # noqa: BLE001 - counted and named
                errors[0] += 1
                print(f"error: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
                continue
            latencies.append(time.perf_counter() - started)
    workers = [threading.Thread(target=client) for _ in range(threads)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - started
    kb.close()
    return elapsed, sorted(latencies), errors[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/kbsync-relay-threads"))
    parser.add_argument("--files", type=int, default=12000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--connections", default="1,4")
    args = parser.parse_args()
    os.environ.update(KBSYNC_HOME=str(args.work / "home"), KBSYNC_EMBED_PROVIDER="hash")
    os.environ.pop("PREFECT_API_URL", None)
    sys.path.insert(0, str(ROOT))
    from kbsync.store.edge import relay_client

    share = _prepare(args.work, args.files)
    ingest = subprocess.Popen([sys.executable, "-m", "kbsync", "ingest", str(share), "--json",
                               "--force"], cwd=str(ROOT), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    time.sleep(8)  # the ingest opens the store and its relay
    values = [int(v) for v in args.connections.split(",")]
    print("| connections | threads | searches/s | p50 ms | p95 ms | errors | load (1 min) "
          "| ingest running at the end |\n|---:|---:|---:|---:|---:|---:|---:|---|", flush=True)
    try:
        for _ in range(args.rounds):
            for value in values:
                relay_client.CONNECTIONS = value
                load = os.getloadavg()[0]
                elapsed, latencies, errors = _turn(args.threads, args.seconds, ingest)
                p50 = latencies[len(latencies) // 2] * 1000 if latencies else 0.0
                p95 = latencies[int(len(latencies) * 0.95)] * 1000 if latencies else 0.0
                print(f"| {value} | {args.threads} | {len(latencies) / elapsed:.1f} | {p50:.1f} | "
                      f"{p95:.1f} | {errors} | {load:.1f} | {ingest.poll() is None} |", flush=True)
    finally:
        ingest.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
