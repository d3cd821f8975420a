"""What the doors of ``kbsync serve`` cost, idle and during an ingest that seals (issue 40; a
script, not a test). Needs root: it makes local users.

    python tests/bench/serve_bench.py [--chunks 2000] [--clients 20] [--searches 200]
        [--mode hybrid] [--embed hash] [--during-ingest [--ingest-chunks 160000]
        [--rounds 4]] [--keep] [--seeded DIR]

The store (a fresh home under /tmp): owner-only texts (the Python API) up to ``--chunks``
chunks, and a share of 240 files of random owners, groups, modes and ACLs over 4 ``useradd``
users (``tests/perms/perm_users.py``), ingested by ``kbsync ingest``. ``--clients`` threads
then run ``--searches`` searches each (``--mode``, unique queries), each thread as one of the
users, three ways one after the other: in process (:func:`kbsync.query.search.search`, one
shared store, ``as_user``), through the Unix socket of a ``kbsync serve`` subprocess (the
thread's effective uid is the user's: ``SO_PEERCRED`` names it) and through HTTP (the user's
token). Every result's doc_id is checked against the files the kernel lets that user read
(``runuser ... test -r``): the owner-only texts are outside every user's set (a control
search by the owner shows they are found).

``--during-ingest``: then a second ``kbsync ingest`` adds at least ``--ingest-chunks``
chunks (files of ~30 chunks, random modes too), with the hash embedder enough for its writer to
seal a segment (with ``--embed local``: exactly ``--ingest-chunks``, at most 20,000, which the
model embeds at ~20 a second; the run prints whether that reaches a seal)
(see ``serve_load.unsealed`` for how the writer counts what it holds unsealed). Once
``serve`` has handed the store over, the three ways take turns, ``--rounds`` turns of
``--searches / --rounds`` searches a client (in process reads through the relay of the
folder's holder then, as the owner's ``kbsync search`` does: never the folder, which would
lock the ingest out), so that each meets the same phases of the ingest. The sealed segments are polled every 0.2 s;
each row says how many seals fell inside its turns, and whether the ingest was still running
at the end of every turn.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import serve_load as sl  # noqa: E402  (puts the worktree and tests/ on sys.path)

PARAGRAPHS = 150  # a file of the ingested part: ~30 chunks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--searches", type=int, default=200)
    parser.add_argument("--mode", default="hybrid", choices=["dense", "hybrid"])
    parser.add_argument("--embed", default="hash", help="hash | local (the default model)")
    parser.add_argument("--during-ingest", action="store_true")
    parser.add_argument("--ingest-chunks", type=int, default=160000)
    parser.add_argument("--rounds", type=int, default=4, help="turns of the ways during ingest")
    parser.add_argument("--users", type=int, default=4)
    parser.add_argument("--keep", action="store_true", help="leave the home and share")
    parser.add_argument("--seeded", default=None, metavar="DIR",
                        help="keep the home with the owner-only texts here, and reuse it")
    args = parser.parse_args()
    if args.during_ingest and args.embed != "hash" and args.ingest_chunks > 20_000:
        parser.error("--during-ingest with the local model embeds --ingest-chunks at ~20 a "
                     "second on 2 cores: give at most 20000 (it seals only if the seeded "
                     "store's open segment fills up; the run prints whether it will)")
    base = sl.fresh_folder(Path(f"/tmp/kbsync-serve-bench-{os.getpid()}"))
    os.environ.update(KBSYNC_HOME=str(base / "home"), KBSYNC_EMBED_PROVIDER=args.embed,
                      HF_HUB_OFFLINE="1")
    from perm_users import local_people, random_share, require_tools

    require_tools()
    try:
        with local_people(args.users, 3, seed=23) as people:
            run(args, base, people, random_share)
    finally:
        if not args.keep:
            import shutil

            shutil.rmtree(base, ignore_errors=True)
    return 0


def run(args, base: Path, people, random_share) -> None:
    from kbsync.settings import load_settings
    from kbsync.store import layout

    settings = load_settings()
    env = sl.ingest_env(base / "home", args.embed)
    owner_target = args.chunks - 240
    t = time.perf_counter()
    cache = Path(args.seeded) / f"{args.embed}-{owner_target}" if args.seeded else None
    if cache is not None and (cache / "owned").is_file():
        subprocess.run(["cp", "-a", "--sparse=always", str(cache / "home"), str(base)],
                       check=True)
        owned = int((cache / "owned").read_text())
    else:
        owned = sl.seed_owner_texts(max(owner_target, 1),
                                    per_doc=1 if args.chunks < 10_000 else 1000)
        if cache is not None:
            cache.mkdir(parents=True, exist_ok=True)
            subprocess.run(["cp", "-a", "--sparse=always", str(base / "home"), str(cache)],
                           check=True)
            (cache / "owned").write_text(str(owned))
    print(f"stored {owned} owner-only chunks in {time.perf_counter() - t:.0f} s", flush=True)
    root = base / "share"
    files = random_share(root, people, seed=23)
    root.chmod(0o755)
    _ingest_and_wait(env, root, base / "ingest-1.log")
    points, open_points, counted = sl.unsealed(settings)
    extra: list[Path] = []
    if args.during_ingest:
        need = layout.SEAL_EVERY - counted  # when the ingest's writer seals (serve_load.unsealed)
        # The hash embedder always reaches the seal; the local model embeds ~20 chunks a second
        # here, so its ingest is what was asked, and the line below says whether it seals.
        want = max(args.ingest_chunks, need + 1000) if args.embed == "hash" else args.ingest_chunks
        extra = sl.grow_share(root / "new", people, files=-(-want // 30),
                              paragraphs=PARAGRAPHS, seed=29)
        print(f"{points} points, {open_points} outside sealed segments ({counted} as the "
              f"writer counts them at open): a seal is due {need} chunks into the ingest of "
              f"{len(extra)} files (~{want} chunks{'' if want > need else ': it will not seal'})",
              flush=True)
    allowed = sl.readable_ids(people.users, files + extra, root)
    user_of = {n: people.users[n % len(people.users)] for n in range(args.clients)}
    uid_of = {n: pwd.getpwnam(u).pw_uid for n, u in user_of.items()}
    may_read = {n: allowed[u] for n, u in user_of.items()}
    print("readable share files per user: "
          + ", ".join(f"{u} {len(allowed[u])}" for u in people.users), flush=True)
    rows: list[tuple[str, str, dict]] = []
    with _in_process_way(args, settings, user_of) as way:  # before serve holds the folder
        rows += _rounds(args, [way], "idle", 1, may_read)

    from kbsync.app.cli_serve import hash_token
    from kbsync.serve.client import ServerClient

    sock, tokens, port = base / "kb.sock", base / "tokens", sl.free_port()
    tokens.write_text("".join(f"{u} {hash_token('tok-' + u)}\n" for u in people.users))
    tokens.chmod(0o600)
    server = subprocess.Popen(
        [sys.executable, "-m", "kbsync", "serve", "--socket", str(sock), "--socket-mode",
         "0666", "--http", f"127.0.0.1:{port}", "--tokens", str(tokens),
         "--max-per-caller", str(args.clients)],
        env={**os.environ, "PYTHONPATH": str(sl.ROOT)}, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    try:
        assert server.stderr is not None
        for line in server.stderr:
            lines.append(line)
            if "kbsync serve ready" in line:
                break
        threading.Thread(target=lambda: lines.extend(server.stderr), daemon=True).start()
        with ServerClient(unix=sock) as owner:  # a control: the check can fail
            mine = [h["doc_id"] for h in owner.search({"query": "volcano report", "k": 20,
                                                       "mode": args.mode})["results"]]
        print(f"control: the owner's own search through the socket: {len(mine)} results, "
              f"{sum(d.startswith('bench/') for d in mine)} owner-only", flush=True)
        doors = _door_ways(args, sock, port, user_of, uid_of)
        rows += _rounds(args, doors, "idle", 1, may_read)
        if args.during_ingest:
            rows += _during(args, settings, env, root, base, sock, doors, user_of, may_read)
    finally:
        server.terminate()
        server.wait(60)
    _table(args, rows, owned, points, people.users)


def _door_ways(args, sock: Path, port: int, user_of, uid_of) -> list[tuple]:
    """``(name, one, euid)`` of the socket and HTTP: one client per thread, as its user."""
    from kbsync.serve.client import ServerClient

    unix = [ServerClient(unix=sock) for _ in range(args.clients)]
    http = [ServerClient(url=f"http://127.0.0.1:{port}", token=f"tok-{user_of[n]}")
            for n in range(args.clients)]

    def ids(client, q: str) -> list[str]:
        return [h["doc_id"] for h in client.search({"query": q, "mode": args.mode})["results"]]
    return [("unix socket", lambda n, q: ids(unix[n], q), uid_of.get),
            ("http", lambda n, q: ids(http[n], q), lambda n: None)]


@contextmanager
def _in_process_way(args, settings, user_of, *, relayed: bool = False):
    """``(name, one, euid)`` in process (``as_user``): on one store opened here, or with
    ``relayed`` through the folder's holder (:class:`serve_load.RelayReader`)."""
    from kbsync.embed import build_embedding_service
    from kbsync.query.search import search
    from kbsync.store import open_store

    service = build_embedding_service(settings)
    if relayed:
        reader = sl.RelayReader(settings)
    else:
        reader = sl.RelayReader.__new__(sl.RelayReader)
        reader.store, reader.run = open_store(settings), lambda work: work(reader.store)
        reader.reconnects = 0
    print(f"in process: the store is a {type(reader.store).__name__}", flush=True)
    try:
        yield ("in process", lambda n, q: [h.doc_id for h in reader.run(lambda st: search(
            q, store=st, service=service, collection=settings.collection, mode=args.mode,
            as_user=user_of[n])).results], lambda n: None)
    finally:
        print(f"in process: {reader.reconnects} reconnects", flush=True)
        reader.store.close()


def _rounds(args, ways, condition: str, rounds: int, may_read, mark=lambda r: None,
            going=lambda: True) -> list:
    """Each way ``rounds`` times in turn, ``--searches / rounds`` searches a client each time,
    so that every way meets the same phases of an ingest; one merged row per way. No turn
    starts once ``going()`` is false (the ingest ended: the row then holds fewer searches)."""
    parts: dict[str, list[dict]] = {name: [] for name, _, _ in ways}
    per = args.searches // rounds
    for turn in range(rounds):
        if not going():
            break
        for name, one, euid in ways:
            part = sl.drive(args.clients, per, one, allowed=may_read.__getitem__, euid=euid,
                            salt=f" {condition} {name} {turn}")  # no way reads another's cache
            mark(part)
            print(f"  {name}, {condition}: {len(part['lat'])} searches in {part['wall']:.0f} s"
                  + (f", seals inside {part['seals']}, ingest running at the end "
                     f"{part['ingesting']}" if "seals" in part else ""), flush=True)
            parts[name].append(part)
    return [(name, condition, sl.merge(p)) for name, p in parts.items()]


def _during(args, settings, env, root, base, sock, doors, user_of, may_read) -> list:
    from kbsync.serve.client import ServerClient

    watch = sl.SealWatch(settings.store_path / settings.collection)
    began = time.time()
    proc = sl.ingest(env, root, base / "ingest-2.log")
    probe = ServerClient(unix=sock)
    while probe.health().get("handovers", 0) < 1:
        if proc.poll() is not None or time.time() - began > 600:
            raise SystemExit(f"the ingest ended (rc {proc.returncode}) or took 600 s before "
                             f"serve handed the store over; see {base / 'ingest-2.log'}")
        time.sleep(0.2)
    print(f"serve handed the store over {time.time() - began:.0f} s after the ingest started",
          flush=True)

    def mark(r: dict) -> None:
        r["seals"] = watch.between(r["t0"], r["t1"])
        r["ingesting"] = proc.poll() is None
    with _in_process_way(args, settings, user_of, relayed=True) as way:
        rows = _rounds(args, [*doors, way], "during ingest", args.rounds, may_read, mark,
                       going=lambda: proc.poll() is None)
    rc = proc.wait()
    watch.stop()
    tail = (base / "ingest-2.log").read_text()[-3000:]
    print(f"ingest: exit {rc} after {time.time() - began:.0f} s; seals during it "
          f"{len(watch.times)} at +" + ", +".join(f"{t - began:.0f}" for t in watch.times)
          + " s", flush=True)
    if rc != 0:
        print(tail)
    try:
        summary = json.loads(tail[tail.index("{"):]) if "{" in tail else {}
    except ValueError:
        summary = {}
    print("ingest summary:", {k: v for k, v in summary.items() if isinstance(v, int) and v}
          if summary else "(not JSON)")
    return rows


def _ingest_and_wait(env, root: Path, log: Path) -> None:
    t = time.perf_counter()
    proc = sl.ingest(env, root, log)
    if proc.wait() != 0:
        raise SystemExit(f"kbsync ingest failed: {log.read_text()[-3000:]}")
    print(f"ingested the share's first part in {time.perf_counter() - t:.0f} s", flush=True)


def _table(args, rows, owned: int, points: int, users: list[str]) -> None:
    print(f"\n{args.clients} clients x {args.searches} {args.mode} searches, {points} points "
          f"({owned} owner-only chunks), embed {args.embed}, {os.cpu_count()} CPUs, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; clients as {len(users)} users")
    print("| way | condition | searches | p50 ms | p95 ms | searches/s | errors | out-of-set "
          "(of checked) | seals inside | load (1 min) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for name, condition, r in rows:
        seals = "" if "seals" not in r else (
            f"{r['seals']}" + ("" if r["ingesting"] else " (ingest over)"))
        print(f"| {name} | {condition} | {r['n']} | {r['p50']:.1f} | {r['p95']:.1f} | {r['per_s']:.0f} "
              f"| {r['errors']} | {r['outside']} ({r['checked']}) | {seals} | {r['load']} |")
    for name, condition, r in rows:
        if r["first_error"] or r["first_outside"]:
            print(f"  {name}, {condition}: first error {r['first_error']!r}, first doc_id "
                  f"outside {r['first_outside']!r}")


if __name__ == "__main__":
    sys.exit(main())
