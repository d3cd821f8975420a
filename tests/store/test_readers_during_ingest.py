"""Search keeps working during an embedded ingest (issue 11 part 7).

The writer is a real separate process holding the embedded store the way the
ingest flow does and writing all the time (``relay_writer.py``: kbsync's
plain runner, hash embeddings, forced re-runs); the readers are the real
``kbsync`` command. The slow test runs the real ``kbsync ingest`` flow.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import kbsync
from kbsync.catalog.state import is_meta
from kbsync.errors import StoreUnavailable
from kbsync.settings import Settings
from kbsync.store import open_store
from kbsync.store.base import Point
from kbsync.store.edge.relay import PROTOCOL_VERSION, recv_frame, send_frame, socket_path
from kbsync.store.edge.relay_client import CONNECTIONS, RelayStore
from kbtest import hash_env, write_tree

KBSYNC = str(Path(sys.executable).with_name("kbsync"))
WRITER = Path(__file__).with_name("relay_writer.py")
FILES = 120


def _share(root: Path, count: int = FILES) -> Path:
    words = "rotate key policy incident backup restore shard replica quota tenant".split()
    write_tree(root, {
        f"d{i % 7}/note{i}.md": f"# Note {i}\n\n## Keys\n\n"
        + " ".join(words[(i + j) % len(words)] for j in range(120)) + f" marker{i}.\n"
        for i in range(count)})
    return root


def _kbsync(env: dict, *args: str, timeout: float = 120) -> tuple[int, dict | None, str]:
    proc = subprocess.run([KBSYNC, *args], env=env, capture_output=True, text=True,
                          timeout=timeout)
    data = json.loads(proc.stdout) if "--json" in args and proc.stdout.strip() else None
    return proc.returncode, data, proc.stderr


class Writer:
    """The ingest-like writer process (see relay_writer.py)."""

    def __init__(self, tmp: Path, home: Path, share: Path) -> None:
        self.stop_file = tmp / f"stop-{time.monotonic_ns()}"
        self.proc = subprocess.Popen([sys.executable, str(WRITER), str(share),
                                      str(self.stop_file)], env=hash_env(None, home), text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        line = self.proc.stdout.readline()
        assert line.strip() == "ready", self.proc.stderr.read()

    def finish(self) -> int:
        """Ask it to stop; the number of ingest runs it completed."""
        self.stop_file.touch()
        out, err = self.proc.communicate(timeout=120)
        assert self.proc.returncode == 0, err
        return int(out.split()[-1])

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate(timeout=30)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def writer(tmp_path: Path, home: Path):
    started = Writer(tmp_path, home, _share(tmp_path / "share"))
    yield started
    started.kill()


def _settings(home: Path) -> Settings:
    return Settings(home=home, embed_provider="hash", qdrant_url=None)


def test_search_and_stats_are_served_while_an_ingest_writes(tmp_path, home, writer):
    sock = socket_path(home, home / "qdrant")
    assert sock.exists() and (sock.stat().st_mode & 0o777) == 0o600
    assert (sock.parent.stat().st_mode & 0o777) == 0o700
    env = hash_env(None, home)
    for _ in range(2):  # two rounds, each while the writer rewrites every document
        code, hits, err = _kbsync(env, "search", "rotate key policy", "--json")
        assert code == 0, err
        assert hits["results"] and hits["results"][0]["doc_id"].startswith("share/")
        code, hits, err = _kbsync(env, "search", "marker7", "--mode", "dense", "-k", "3",
                                  "--json")
        assert code == 0, err
        assert hits["results"]
        code, stats, err = _kbsync(env, "stats", "--json")
        assert code == 0, err
        assert stats["namespaces"]["default"]["documents"] == FILES
        assert stats["namespaces"]["default"]["chunks"] >= FILES
        assert writer.proc.poll() is None, "the writer ended before the readers did"
    assert writer.finish() >= 2  # it kept writing while being read
    assert not sock.exists()  # removed on close
    # Started after the writer exited: opens the folder itself (no relay left to go through).
    code, stats, err = _kbsync(env, "stats", "--json")
    assert code == 0, err
    assert stats["namespaces"]["default"]["documents"] == FILES
    store = open_store(_settings(home))
    try:
        assert type(store).__name__ == "EdgeStore"
    finally:
        store.close()


def test_relay_store_refuses_writes_and_reopens_when_the_ingest_ends(home, writer):
    store = open_store(_settings(home))
    try:
        assert isinstance(store, RelayStore) and store.pid == writer.proc.pid
        before = store.count("kbsync")
        assert before >= FILES
        with pytest.raises(StoreUnavailable, match="read-only"):
            store.upsert("kbsync", [Point(id="00000000-0000-0000-0000-000000000001",
                                          payload={}, vector=[1.0] * 384)])
        with pytest.raises(StoreUnavailable, match="read-only"):
            store.ensure_collection("other", dimension=4)
        found = kbsync.search("marker5", settings=_settings(home), mode="dense", k=3)
        assert found.results and found.results[0].doc_id.startswith("share/")  # Python API
        states = list(store.scroll("kbsync_state", page_size=7))  # several relay pages
        assert len({p.id for p in states}) == len(states)
        assert len([p for p in states if p.payload["doc_id"].startswith("share/")]) == FILES
        writer.finish()
        # The relay closed between two calls: the next call opens the store directly, and
        # reads the same document records (the run's end may add meta records, such as a
        # root's chunk total: not documents).
        after = list(store.scroll("kbsync_state", page_size=64))
        assert store.count("kbsync_state") == len(after) >= len(states)
        assert ({p.id for p in after if not is_meta(p.payload)}
                == {p.id for p in states if not is_meta(p.payload)})
    finally:
        store.close()
    assert open_store(_settings(home)).__class__.__name__ == "EdgeStore"


def test_calls_from_several_threads_go_out_side_by_side(home, writer):
    """One RelayStore shared by threads (``kbsync serve`` during an ingest) opens up to
    ``CONNECTIONS`` connections, every call answered; once the ingest ends the next call
    opens the folder and every connection is closed."""
    store = open_store(_settings(home))
    errors: list[BaseException] = []
    seen: list[int] = []

    def reader(n: int) -> None:
        try:
            for i in range(25):
                hits = store.search("kbsync", [float((n + i) % 7 + 1)] * 384, limit=3)
                assert len(hits) == 3
                assert store.count("kbsync") >= FILES
                seen.append(store.connections)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
    try:
        assert isinstance(store, RelayStore)
        threads = [threading.Thread(target=reader, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not errors, errors
        assert 1 < max(seen) <= CONNECTIONS
        assert writer.proc.poll() is None
        writer.finish()
        assert store.count("kbsync") >= FILES  # the folder itself now
        assert store.connections == 0
    finally:
        store.close()


def _freeze(pid: int) -> None:
    """SIGSTOP ``pid`` and wait until every one of its threads is stopped (delivery is async)."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 30
    while True:
        states = [(task / "stat").read_text().rsplit(")", 1)[1].split()[0]
                  for task in Path(f"/proc/{pid}/task").iterdir()]
        if all(state in ("T", "t") for state in states):
            return
        assert time.monotonic() < deadline, states
        time.sleep(0.02)


def _connections(path: Path) -> int:
    """Unix sockets bound to ``path``: the listener plus connections not yet accepted."""
    text = Path("/proc/net/unix").read_text()
    return sum(1 for line in text.splitlines() if line.rstrip().endswith(str(path)))


def test_relay_gone_mid_call_is_one_line_exit_1(home, writer):
    sock = socket_path(home, home / "qdrant")
    _freeze(writer.proc.pid)  # the relay can no longer answer
    try:
        baseline = _connections(sock)
        reader = subprocess.Popen([KBSYNC, "stats", "--json"], env=hash_env(None, home), text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while _connections(sock) <= baseline:  # the reader connected and sent its request
            assert time.monotonic() < deadline and reader.poll() is None, reader.stderr.read()
            time.sleep(0.05)
        time.sleep(0.3)
    finally:
        os.kill(writer.proc.pid, signal.SIGKILL)
    _, err = reader.communicate(timeout=60)
    assert reader.returncode == 1, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "StoreUnavailable" in lines[0] and "went away" in lines[0], err


def test_a_stale_socket_is_ignored_by_readers_and_replaced_by_the_next_ingest(tmp_path, home):
    share = _share(tmp_path / "share")
    crashed = Writer(tmp_path, home, share)
    crashed.proc.kill()  # a crash: the socket file stays behind
    crashed.kill()
    sock = socket_path(home, home / "qdrant")
    assert sock.exists()
    env = hash_env(None, home)
    code, stats, err = _kbsync(env, "stats", "--json")  # free folder: opened directly
    assert code == 0, err
    assert stats["namespaces"]["default"]["documents"] == FILES
    code, hits, err = _kbsync(env, "search", "marker3", "--json")
    assert code == 0, err
    assert hits["results"]
    again = Writer(tmp_path, home, share)  # replaces the stale socket and serves
    try:
        code, hits, err = _kbsync(env, "search", "marker3", "--json")
        assert code == 0, err
        assert hits["results"]
        assert again.proc.poll() is None
        again.finish()
    finally:
        again.kill()


def test_a_relay_that_does_not_answer_fails_within_the_call_timeout(home, writer):
    sock = socket_path(home, home / "qdrant")
    store = RelayStore.connect(home / "qdrant", sock, call_timeout_s=1.0)
    _freeze(writer.proc.pid)
    try:
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="did not answer count within 1 s"):
            store.count("kbsync")
        assert time.monotonic() - started < 5
    finally:
        os.kill(writer.proc.pid, signal.SIGCONT)
        store.close()


def test_protocol_version_is_checked(home, writer):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(10)
        conn.connect(str(socket_path(home, home / "qdrant")))
        send_frame(conn, {"v": PROTOCOL_VERSION + 1, "op": "hello", "args": {}})
        reply = recv_frame(conn)
        assert reply["ok"] is False and reply["error"]["kind"] == "StoreUnavailable"
        send_frame(conn, {"v": PROTOCOL_VERSION, "op": "upsert", "args": {}})
        reply = recv_frame(conn)
        assert reply["ok"] is False and "no operation 'upsert'" in reply["error"]["message"]
