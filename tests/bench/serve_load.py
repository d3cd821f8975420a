"""Helpers of ``serve_bench.py`` (issue 40): the clients' loop, per-thread identities, the
store's contents, an ingest in a subprocess and the seals it makes. A bench module, not a test.

Identities: every client searches as one of a few ``useradd`` users (:mod:`perm_users`), the
same user on every way: in process with ``as_user``, through HTTP with that user's token, and
through the Unix socket from a thread whose *effective uid alone* is the user's (the raw
``setresuid`` syscall changes one thread's credentials; glibc's ``setuid`` would change every
thread's), so the kernel's ``SO_PEERCRED`` names the user, as for a separate process.
"""

from __future__ import annotations

import ctypes
import os
import random
import shutil
import statistics
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "perms")]

WORDS = ("volcano glacier harbour orchard lighthouse canyon meadow river forest desert island "
         "bridge tunnel market castle valley summit delta reef tundra").split()
SYS_SETRESUID = 117  # x86_64
_libc = ctypes.CDLL(None, use_errno=True)


def queries(client: int, n: int, salt: str = "") -> list[str]:
    """``n`` queries, unique per client, position and ``salt`` (a way and turn: with a real
    model, a query another way embedded first would come from the embedding cache)."""
    rng = random.Random(f"{11 + client}{salt}")
    return [f"{rng.choice(WORDS)} {rng.choice(WORDS)} report {client}x{i}{salt}" for i in range(n)]


@contextmanager
def thread_euid(uid: int | None) -> Iterator[None]:
    """This thread's effective uid is ``uid`` inside (``None``: unchanged)."""
    if uid is None:
        yield
        return
    _setresuid_thread(uid)
    try:
        yield
    finally:
        _setresuid_thread(0)


def _setresuid_thread(euid: int) -> None:
    if _libc.syscall(SYS_SETRESUID, -1, euid, -1) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setresuid(-1, {euid}, -1): {os.strerror(err)}")


def drive(clients: int, searches: int, one: Callable[[int, str], list[str]], *,
          allowed: Callable[[int], set[str]], euid: Callable[[int], int | None] = lambda n: None,
          salt: str = "") -> dict:
    """``clients`` threads each calling ``one(thread, query) -> doc_ids`` ``searches`` times
    (the first call of each thread, a warm-up that connects, not timed); every doc_id is
    checked against ``allowed(thread)``. ``salt`` makes the queries this call's own
    (:func:`queries`)."""
    latencies: list[float] = []
    errors: list[BaseException] = []
    outside: list[str] = []
    checked = [0]
    lock = threading.Lock()
    start = threading.Barrier(clients + 1)

    def worker(n: int) -> None:
        mine, bad, seen, qs = [], [], 0, queries(n, searches, salt)
        with thread_euid(euid(n)):
            try:
                one(n, f"warm up {n}")
            except Exception as exc:  # noqa: BLE001 - counted
                with lock:
                    errors.append(exc)
            start.wait()
            for q in qs:
                t = time.perf_counter()
                try:
                    ids = one(n, q)
                except Exception as exc:  # noqa: BLE001 - counted
                    with lock:
                        errors.append(exc)
                    continue
                mine.append((time.perf_counter() - t) * 1000)
                seen += len(ids)
                bad += [d for d in ids if d not in allowed(n)]
        with lock:
            latencies.extend(mine)
            outside.extend(bad)
            checked[0] += seen
    threads = [threading.Thread(target=worker, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    load = os.getloadavg()[0]
    start.wait()
    began, t0 = time.perf_counter(), time.time()
    for t in threads:
        t.join()
    wall = time.perf_counter() - began
    latencies.sort()
    return {"lat": latencies, "wall": wall, "errors": len(errors), "outside": len(outside),
            "checked": checked[0], "t0": t0, "t1": time.time(), "load": (load, os.getloadavg()[0]),
            "first_error": repr(errors[0]) if errors else "",
            "first_outside": outside[0] if outside else ""}


def merge(parts: list[dict]) -> dict:
    """One row from the rounds of one way: percentiles over every latency, throughput over the
    rounds' summed wall time, the load from the first round's start to the last one's end."""
    lat = sorted(x for p in parts for x in p["lat"])
    wall = sum(p["wall"] for p in parts)
    row = {"p50": statistics.median(lat) if lat else float("nan"),
           "p95": lat[int(len(lat) * 0.95)] if lat else float("nan"),
           "per_s": len(lat) / wall if wall else 0.0, "n": len(lat),
           "load": f"{parts[0]['load'][0]:.2f} -> {parts[-1]['load'][1]:.2f}",
           "first_error": next((p["first_error"] for p in parts if p["first_error"]), ""),
           "first_outside": next((p["first_outside"] for p in parts if p["first_outside"]), "")}
    for key in ("errors", "outside", "checked"):
        row[key] = sum(p[key] for p in parts)
    if "seals" in parts[0]:
        row["seals"] = sum(p["seals"] for p in parts)
        row["ingesting"] = all(p["ingesting"] for p in parts)
    return row


# --- the store's contents ---------------------------------------------------------------------
def seed_owner_texts(chunks: int, *, per_doc: int) -> int:
    """Store texts (through the Python API: owner-only, no share's reader may see them) until
    they hold ``chunks`` chunks; ``per_doc`` paragraphs a text. Returns the chunks stored."""
    from kbsync import api

    rng, stored, i = random.Random(7), 0, 0
    with api.KnowledgeBase() as kb:
        while stored < chunks:
            paras = "\n\n".join(f"Report {i} part {j} on the {rng.choice(WORDS)}: "
                                + " ".join(rng.choice(WORDS) for _ in range(60)) + "."
                                for j in range(per_doc))
            stored += kb.add_text(paras, f"bench/doc{i}").chunks
            i += 1
    return stored


def grow_share(root: Path, people, *, files: int, paragraphs: int, seed: int) -> list[Path]:
    """``files`` Markdown files of ``paragraphs`` paragraphs under ``root``, each with a random
    owner, group, mode and sometimes ACL entries (:func:`perm_users._randomise`)."""
    from perm_users import FILE_MODES, _randomise

    rng = random.Random(seed)
    owners = [*people.users, "root"]
    made = []
    for i in range(files):
        path = root / f"g{i % 16}" / f"n{i}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.parent.chmod(0o755)
        path.write_text(f"# Field note {i}\n\n" + "\n\n".join(
            f"Section {j}: the {rng.choice(WORDS)} " + " ".join(rng.choice(WORDS)
                                                              for _ in range(60)) + "."
            for j in range(paragraphs)) + "\n", encoding="utf-8")
        _randomise(path, rng, owners, people, FILE_MODES, 0.3, folder=False)
        made.append(path)
    return made


def readable_ids(users: list[str], files: list[Path], root: Path) -> dict[str, set[str]]:
    """Per user, the doc_ids of ``files`` (root named ``share``) the kernel lets them read."""
    from perm_users import kernel_readable

    return {u: {f"share/{p.relative_to(root).as_posix()}" for p in kernel_readable(u, files)}
            for u in users}


def unsealed(settings) -> tuple[int, int, int]:
    """``(points, points outside sealed segments, the writer's count of them)`` of the
    collection (opens the store). The writer's count at open is ``seal.unsealed_points`` with
    the shard folder: the larger of ``points - indexed vectors`` (which reads 0 on a hybrid
    collection: the engine counts every sparse vector as indexed) and the appendable
    segment's own version log; before that fix it started at 0. The true figure here: the
    sealed segments' points on disk."""
    from kbsync.store import open_store
    from kbsync.store.edge.seals import sealed_segments

    store = open_store(settings)
    try:
        shard = store._require(settings.collection)
        points, counted = int(shard.shard.info().points_count), int(shard.unsealed)
    finally:
        store.close()
    sealed = sum((seg / "id_tracker.versions").stat().st_size // 8
                 for seg in sealed_segments(settings.store_path / settings.collection).values())
    return points, points - sealed, counted


# --- an ingest beside the searches -------------------------------------------------------------
class RelayReader:
    """In process during an ingest: the store read through the relay of whichever process
    holds the folder (the ingest, or ``serve`` between the ingest's opens), never the folder
    itself, so the ingest is never locked out by the bench. When the holder goes away
    mid-call it connects again, once, as ``serve``'s holder does (``reconnects`` counts it)."""

    def __init__(self, settings) -> None:
        from kbsync.store.edge.relay import socket_path

        self.path, self.sock = settings.store_path, socket_path(settings.home,
                                                                settings.store_path)
        self._lock = threading.Lock()
        self.reconnects = 0
        self.store = self._connect()

    def _connect(self):
        from kbsync.errors import RelayUntrusted
        from kbsync.store.edge.relay_client import RelayStore

        deadline = time.monotonic() + 30
        while True:
            try:
                return RelayStore.connect(self.path, self.sock)
            except RelayUntrusted:
                raise
            except Exception:  # noqa: BLE001 - between holders: wait for the next relay
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def run(self, work):
        from kbsync.errors import StoreUnavailable

        store = self.store
        try:
            return work(store)
        except StoreUnavailable:
            with self._lock:
                if self.store is store:
                    self.store, self.reconnects = self._connect(), self.reconnects + 1
            return work(self.store)

    def close(self) -> None:
        self.store.close()


def ingest_env(home: Path, embed: str) -> dict[str, str]:
    from kbtest import cli_env

    return cli_env(None, home, KBSYNC_EMBED_PROVIDER=embed, KBSYNC_CONVERT_ISOLATION="false",
                   PYTHONPATH=str(ROOT))


def ingest(env: dict[str, str], root: Path, log: Path) -> subprocess.Popen:
    """``kbsync ingest share=ROOT --json`` started (its own temporary Prefect server)."""
    with log.open("w") as out:
        return subprocess.Popen([sys.executable, "-m", "kbsync", "ingest", f"share={root}",
                                 "--json"], env=env, stdout=out, stderr=subprocess.STDOUT,
                                cwd="/")


class SealWatch:
    """Polls the collection folder's sealed segments every 0.2 s; :attr:`times` are when a
    new one appeared (``time.time()``)."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.times = folder, []
        self._stop = threading.Event()
        self.start_count = self._count()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _count(self) -> int:
        from kbsync.store.edge.seals import sealed_segments

        try:
            return len(sealed_segments(self.folder))
        except OSError:
            return -1

    def _run(self) -> None:
        last = self.start_count
        while not self._stop.wait(0.2):
            now = self._count()
            if now > last >= 0:
                self.times += [time.time()] * (now - last)
            if now >= 0:
                last = now

    def between(self, t0: float, t1: float) -> int:
        return sum(t0 <= t <= t1 for t in self.times)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fresh_folder(path: Path) -> Path:
    """``path`` emptied, mode 0755 (every test user traverses it to reach the socket)."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    path.chmod(0o755)
    return path
