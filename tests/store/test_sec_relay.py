"""No reader takes another user's relay socket for its store's (issue 22, Security).

The other user is real: made with ``useradd`` for the test, it runs a poisoned
relay (``fake_relay.py``, the system Python) that answers every call with
``EVIL`` hits. The store is really held (an ``EdgeStore`` in this process, or the
ingest-like ``relay_writer.py``), so the readers really go to the relay. A home
long enough to push the socket past the Unix path limit selects the fallback
folders; a world-writable sticky folder stands in for ``/tmp`` (``TMPDIR``), so
the test never touches the real ``/tmp/kbsync-<uid>``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from kbsync.errors import RelayUntrusted
from kbsync.store.edge.store import EdgeStore
from kbsync.store.edge.relay import socket_path
from kbsync.store.edge.relay_client import open_reader
from kbtest import write_tree

KBSYNC = str(Path(sys.executable).with_name("kbsync"))
HERE = Path(__file__).parent
SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin")

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd")
                                or SYSTEM_PYTHON is None,
                                reason="needs root and useradd (a second real user), and a "
                                       "system python3 that user can run")


class OtherUser:
    """A second local user, and the poisoned relays it runs."""

    def __init__(self, public: Path) -> None:
        self.name = f"kbsec{uuid.uuid4().hex[:8]}"
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin",
                        self.name], check=True, capture_output=True)
        out = subprocess.run(["id", "-u", self.name], check=True, capture_output=True, text=True)
        self.uid = int(out.stdout)
        self.script = public / "fake_relay.py"  # where this user can read it
        shutil.copy(HERE / "fake_relay.py", self.script)
        self.script.chmod(0o644)
        self._procs: list[subprocess.Popen] = []

    def serve(self, sock: Path, *, make_folder: bool = False) -> subprocess.Popen:
        """Start a poisoned relay on ``sock`` as this user; return once it listens."""
        proc = subprocess.Popen([SYSTEM_PYTHON, str(self.script), str(sock)]
                                + (["make-folder"] if make_folder else []),
                                user=self.uid, group=self.uid, extra_groups=[],
                                env={"PATH": "/usr/bin:/bin"}, cwd="/", text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self._procs.append(proc)
        line = proc.stdout.readline()
        assert line.strip() == "ready", proc.stderr.read()
        return proc

    def close(self) -> None:
        for proc in self._procs:
            proc.kill()
            proc.communicate(timeout=30)
        subprocess.run(["userdel", self.name], check=False, capture_output=True)


@pytest.fixture
def public() -> Path:
    """A world-writable sticky folder, as ``/tmp`` is (every user can reach and create)."""
    folder = Path(tempfile.mkdtemp(prefix="kbsec", dir="/tmp"))
    folder.chmod(0o1777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def other(public: Path) -> OtherUser:
    user = OtherUser(public)
    yield user
    user.close()


@pytest.fixture
def long_home(tmp_path: Path, public: Path, monkeypatch) -> Path:
    """A home whose ``run/store.sock`` is over the socket path limit: the temp fallback."""
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(public))  # what gettempdir() answers
    home = tmp_path / ("h" * 100)
    assert not str(socket_path(home, home / "qdrant")).startswith(str(home))
    return home


def _reader_env(home: Path, public: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("KBSYNC_") and k != "XDG_RUNTIME_DIR"}
    env.update(KBSYNC_HOME=str(home), KBSYNC_EMBED_PROVIDER="hash", TMPDIR=str(public),
               KBSYNC_CONVERT_ISOLATION="false", HF_HUB_OFFLINE="1", **extra)
    return env


def test_a_fallback_folder_pre_created_by_another_user_is_refused(long_home, public, other):
    sock = socket_path(long_home, long_home / "qdrant")
    assert sock.parent == public / f"kbsync-{os.getuid()}"  # predictable: the attack
    other.serve(sock, make_folder=True)
    held = EdgeStore(long_home / "qdrant")  # the store is held, so readers go to the relay
    held.ensure_collection("kbsync", dimension=384)  # something indexed: search opens the store
    try:
        with pytest.raises(RelayUntrusted, match=f"owned by uid {other.uid}") as refused:
            open_reader(long_home / "qdrant", sock)
        assert str(sock.parent) in str(refused.value)
        # The ingest side refuses the folder too: it serves nothing there, and keeps working.
        assert held.serve_readers(sock) is False
        # The real command: one line naming the folder, exit 1, no poisoned hit.
        proc = subprocess.run([KBSYNC, "search", "poison", "--json"], capture_output=True,
                              text=True, timeout=120, env=_reader_env(long_home, public))
    finally:
        held.close()
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "EVIL" not in proc.stdout
    assert json.loads(proc.stdout)["error"]["kind"] == "RelayUntrusted"
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "RelayUntrusted" in lines[0] and str(sock.parent) in lines[0], \
        proc.stderr


def _served_by_other_in_our_folder(folder: Path, sock: Path, other: OtherUser) -> None:
    """Our own private folder, with the other user's socket in it (the folder check passes:
    only the peer check can tell)."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chown(folder, other.uid, other.uid)  # lend it for the bind
    try:
        other.serve(sock)
    finally:
        os.chown(folder, 0, 0)
        folder.chmod(0o700)


def test_a_socket_served_by_another_uid_is_refused_on_the_fallback_path(long_home, other):
    sock = socket_path(long_home, long_home / "qdrant")
    _served_by_other_in_our_folder(sock.parent, sock, other)
    held = EdgeStore(long_home / "qdrant")
    try:
        with pytest.raises(RelayUntrusted, match=f"served by uid {other.uid}") as refused:
            open_reader(long_home / "qdrant", sock)
        assert str(sock) in str(refused.value)
    finally:
        held.close()


def test_a_socket_served_by_another_uid_is_refused_on_the_home_path(public, other):
    home = public / "home"  # short: the primary <home>/run/store.sock
    home.mkdir()
    home.chmod(0o711)  # the other user may pass through, as into a home folder
    sock = socket_path(home, home / "qdrant")
    assert sock == home / "run" / "store.sock"
    _served_by_other_in_our_folder(sock.parent, sock, other)
    held = EdgeStore(home / "qdrant")
    try:
        with pytest.raises(RelayUntrusted, match=f"served by uid {other.uid}"):
            open_reader(home / "qdrant", sock)
    finally:
        held.close()


@pytest.mark.parametrize("mode", [0o755, 0o770, 0o1777], ids=["0755", "0770", "1777"])
def test_a_relay_folder_others_can_enter_is_refused_by_both_ends(long_home, mode):
    sock = socket_path(long_home, long_home / "qdrant")
    held = EdgeStore(long_home / "qdrant")
    try:
        assert held.serve_readers(sock) is True  # creates the folder 0700
        assert sock.parent.stat().st_mode & 0o777 == 0o700
        sock.parent.chmod(mode)  # now anyone could have swapped the socket
        with pytest.raises(RelayUntrusted, match=f"mode {mode & 0o7777:04o}") as refused:
            open_reader(long_home / "qdrant", sock)
        assert str(sock.parent) in str(refused.value)
    finally:
        held.close()
    held = EdgeStore(long_home / "qdrant")  # a later ingest: refuses the folder, never chmods it
    try:
        assert held.serve_readers(sock) is False
        assert not sock.exists() and sock.parent.stat().st_mode & 0o7777 == mode
    finally:
        held.close()


def test_xdg_runtime_dir_is_preferred_when_it_is_ours(long_home, public, monkeypatch):
    runtime = Path(tempfile.mkdtemp(prefix="xdg", dir="/tmp"))  # short, ours, 0700
    try:
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
        assert socket_path(long_home, long_home / "qdrant").parent == runtime / "kbsync"
        os.chown(runtime, 12345, 12345)  # someone else's (after su): not trusted, not used
        assert socket_path(long_home, long_home / "qdrant").parent == public / f"kbsync-{os.getuid()}"
        os.chown(runtime, 0, 0)
        monkeypatch.setenv("XDG_RUNTIME_DIR", "relative/dir")
        assert socket_path(long_home, long_home / "qdrant").parent == public / f"kbsync-{os.getuid()}"
    finally:
        shutil.rmtree(runtime)


@pytest.mark.parametrize("where", ["xdg", "tmp", "home"])
def test_the_relay_still_serves_our_own_readers(tmp_path, public, where):
    """An ingest-like writer and the real ``kbsync search`` of the same user, on each path."""
    runtime = Path(tempfile.mkdtemp(prefix="xdg", dir="/tmp"))
    home = public / "home" if where == "home" else tmp_path / ("h" * 100)
    extra = {"XDG_RUNTIME_DIR": str(runtime)} if where == "xdg" else {}
    env = _reader_env(home, public, **extra)
    share = tmp_path / "share"
    write_tree(share, {f"n{i}.md": f"# Note {i}\n\nrotate the key marker{i}.\n" for i in range(8)})
    stop = tmp_path / "stop"
    writer = subprocess.Popen([sys.executable, str(HERE / "relay_writer.py"), str(share),
                               str(stop)], env=env, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    try:
        assert writer.stdout.readline().strip() == "ready", writer.stderr.read()
        expected = {"xdg": runtime / "kbsync", "tmp": public / f"kbsync-{os.getuid()}",
                    "home": home / "run"}[where]
        sockets = list(expected.glob("*.sock"))
        assert len(sockets) == 1 and sockets[0].parent.stat().st_mode & 0o777 == 0o700
        proc = subprocess.run([KBSYNC, "search", "marker3", "--json"], capture_output=True,
                              text=True, timeout=120, env=env)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["results"][0]["doc_id"] == "share/n3.md"
        assert writer.poll() is None  # it was read through the relay, not after the writer
    finally:
        stop.touch()
        writer.communicate(timeout=120)
        shutil.rmtree(runtime, ignore_errors=True)
    assert writer.returncode == 0
