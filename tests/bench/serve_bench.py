"""What the doors of ``kbsync serve`` cost (issue 40; a script, not a test).

    python tests/bench/serve_bench.py [--docs 2000] [--clients 20] [--searches 200]
        [--mode hybrid] [--embed hash] [--home DIR]

Stores ``--docs`` short documents (the Python API, ``--embed`` provider: ``hash`` by default,
``fastembed`` for the default model) in a fresh home, then runs ``--clients`` threads of
``--searches`` searches each (``--mode``), three ways one after the other: in process
(:func:`kbsync.query.search.search` on one shared store), through the Unix socket (a
``kbsync serve`` subprocess, one :class:`~kbsync.serve.client.ServerClient` per thread) and
through HTTP (same server, a bearer token). Prints p50, p95, throughput and errors per way,
with the 1-minute load average before and after each: only ratios within one run travel.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

WORDS = ("volcano glacier harbour orchard lighthouse canyon meadow river forest desert island "
         "bridge tunnel market castle valley summit delta reef tundra").split()


def _seed(docs: int) -> None:
    from kbsync import api

    rng = random.Random(7)
    with api.KnowledgeBase() as kb:
        for i in range(docs):
            words = " ".join(rng.choice(WORDS) for _ in range(40))
            kb.add_text(f"Report {i} on the {rng.choice(WORDS)}: {words}.", f"bench/doc{i}")


def _queries(n: int) -> list[str]:
    rng = random.Random(11)
    return [f"{rng.choice(WORDS)} {rng.choice(WORDS)} report" for _ in range(n)]


def _drive(clients: int, searches: int, one) -> dict:
    """``clients`` threads each calling ``one(thread, query)`` ``searches`` times."""
    latencies: list[float] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(clients + 1)

    def worker(n: int) -> None:
        mine, queries = [], _queries(searches)
        start.wait()
        for q in queries:
            t = time.perf_counter()
            try:
                one(n, q)
            except Exception as exc:  # noqa: BLE001 - counted
                with lock:
                    errors.append(exc)
                continue
            mine.append((time.perf_counter() - t) * 1000)
        with lock:
            latencies.extend(mine)
    threads = [threading.Thread(target=worker, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    load = os.getloadavg()[0]
    start.wait()
    began = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - began
    latencies.sort()
    return {"p50": statistics.median(latencies) if latencies else float("nan"),
            "p95": latencies[int(len(latencies) * 0.95)] if latencies else float("nan"),
            "per_s": len(latencies) / wall, "errors": len(errors), "n": len(latencies),
            "load": f"{load:.2f} -> {os.getloadavg()[0]:.2f}",
            "first_error": repr(errors[0]) if errors else ""}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--searches", type=int, default=200)
    parser.add_argument("--mode", default="hybrid", choices=["dense", "hybrid"])
    parser.add_argument("--embed", default="hash")
    parser.add_argument("--home", default=None)
    args = parser.parse_args()
    base = Path(args.home or tempfile.mkdtemp(prefix="kbsync-serve-bench-"))
    os.environ.update(KBSYNC_HOME=str(base / "home"), KBSYNC_EMBED_PROVIDER=args.embed,
                      HF_HUB_OFFLINE="1")
    if not (base / "home").exists():
        t = time.perf_counter()
        _seed(args.docs)
        print(f"stored {args.docs} documents in {time.perf_counter() - t:.1f} s")
    rows = {}

    from kbsync.embed import build_embedding_service
    from kbsync.query.search import search
    from kbsync.settings import load_settings
    from kbsync.store import open_store

    settings = load_settings()
    store, service = open_store(settings), build_embedding_service(settings)
    try:
        search("warm up", store=store, service=service, collection=settings.collection)
        rows["in process"] = _drive(args.clients, args.searches, lambda n, q: search(
            q, store=store, service=service, collection=settings.collection, mode=args.mode))
    finally:
        store.close()

    from kbsync.app.cli_serve import hash_token
    from kbsync.serve.client import ServerClient

    sock, tokens, port = base / "kb.sock", base / "tokens", _free_port()
    tokens.write_text(f"root {hash_token('bench')}\n")
    tokens.chmod(0o600)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen([sys.executable, "-m", "kbsync", "serve", "--socket", str(sock),
                               "--http", f"127.0.0.1:{port}", "--tokens", str(tokens),
                               "--max-per-caller", str(args.clients)],
                              env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stderr is not None
        for line in server.stderr:
            if "kbsync serve ready" in line:
                break
        threading.Thread(target=lambda: [None for _ in server.stderr], daemon=True).start()
        for name, make in (("unix socket", lambda: ServerClient(unix=sock)),
                           ("http", lambda: ServerClient(url=f"http://127.0.0.1:{port}",
                                                         token="bench"))):
            clients = [make() for _ in range(args.clients)]
            clients[0].search({"query": "warm up"})
            rows[name] = _drive(args.clients, args.searches, lambda n, q: clients[n].search(
                {"query": q, "mode": args.mode}))
    finally:
        server.terminate()
        server.wait(60)
    print(f"{args.clients} clients x {args.searches} {args.mode} searches, {args.docs} documents, "
          f"embed {args.embed}, {os.cpu_count()} CPUs")
    print("| way | p50 ms | p95 ms | searches/s | errors | load (1 min) |")
    print("|---|---:|---:|---:|---:|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['p50']:.1f} | {r['p95']:.1f} | {r['per_s']:.0f} | {r['errors']} "
              f"| {r['load']} |")
        if r["first_error"]:
            print(f"  first error: {r['first_error']}")
    return 0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    sys.exit(main())
