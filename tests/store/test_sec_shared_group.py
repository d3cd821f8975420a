"""A home shared with a group serves every member, turn after turn (issue 37,
"KBSYNC_SHARED_GROUP locks out every member but the last writer").

Invariant (docs/SECURITY.md, kbsync.home): everything kbsync makes in a shared home is the
group's (folders 2770, files 0660): ``run/`` (the relay), the cache database and its journal
files, the locks, the pointer, the store. Before the fix the first member's ingest left
``run/`` 2700 and ``cache/cache.db`` 0640, and the other member's next command failed with
``HomeExposed: cannot check the permissions under .../run``.

Two real users made with ``useradd`` and a group with ``groupadd``, taking turns at the real
``kbsync ingest`` and ``kbsync search`` through ``runuser`` (the system Python 3.11 with this
checkout's venv on its path: the venv's interpreter lies under root's private home). Each
ingest runs in process (no PREFECT_API_URL; before issue 42 it started Prefect's temporary
server): slow tier. The names are fixed per module and the
module runs on one xdist worker (``--dist loadfile``).
"""

from __future__ import annotations

import json
import os
import shutil
import site
import stat
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

from kbtest import REPO, write_tree

HERE = Path(__file__).resolve().parent
PYTHON = "/usr/bin/python3.11"
MAIN = "import sys; from kbsync.app.cli import main; sys.argv[0] = 'kbsync'; sys.exit(main())"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or not all(map(shutil.which, ("useradd", "groupadd",
                                                                          "runuser")))
                       or not os.access(PYTHON, os.X_OK),
                       reason="needs root, useradd, groupadd, runuser and /usr/bin/python3.11 "
                              "(two real users run the CLI)"),
]


@pytest.fixture
def members():
    """A throwaway group and two throwaway users in it (removed at teardown)."""
    tag = uuid.uuid4().hex[:6]
    group, users = f"kbshare{tag}", [f"kbm1{tag}", f"kbm2{tag}"]
    subprocess.run(["groupadd", group], check=True)
    try:
        for user in users:
            subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", "-G", group,
                            user], check=True)
        yield group, users
    finally:
        for user in users:
            subprocess.run(["userdel", user], check=False)
        subprocess.run(["groupdel", group], check=False)


@pytest.fixture
def place():
    """A folder every user can enter (pytest's tmp folders are root's 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="kbgrp-", dir="/tmp"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _shim(place: Path) -> Path:
    """redis (under Prefect's server) imports ``async_timeout`` below Python 3.11.3, which the
    venv (3.11.7) lacks; the system 3.11.2 gets the standard library's equivalent."""
    folder = place / "shim"
    if not folder.exists():
        folder.mkdir()
        folder.chmod(0o755)  # whatever the umask an earlier test's store left (0077)
        (folder / "async_timeout.py").write_text("from asyncio import timeout  # noqa: F401\n")
        (folder / "async_timeout.py").chmod(0o644)
    return folder


def _kbsync(user: str, place: Path, group: str, *args: str) -> subprocess.CompletedProcess:
    """The real CLI as ``user``, in a clean environment, with the shared home."""
    return subprocess.run(_command(user, place, group, "-c", MAIN, *args), capture_output=True,
                          text=True, timeout=300)


def _command(user: str, place: Path, group: str, *python_args: str) -> list[str]:
    """``python *python_args`` as ``user``, in a clean environment, with the shared home."""
    own = place / f"home-{user}"  # the user's HOME (Prefect's temporary server keeps files there)
    if not own.exists():
        own.mkdir(mode=0o700)
        shutil.chown(own, user)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(own), "LANG": "C.UTF-8",
           "PYTHONPATH": os.pathsep.join([str(REPO), *site.getsitepackages(), str(_shim(place))]),
           "KBSYNC_HOME": str(place / "team" / "kb"), "KBSYNC_SHARED_GROUP": group,
           "KBSYNC_EMBED_PROVIDER": "hash", "KBSYNC_CONVERT_ISOLATION": "false",
           "HF_HUB_OFFLINE": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    return ["runuser", "-u", user, "--", "env", "-i", *(f"{k}={v}" for k, v in env.items()),
            PYTHON, "-s", *python_args]


def _ok(proc: subprocess.CompletedProcess, who: str) -> dict:
    assert proc.returncode == 0, f"{who}: exit {proc.returncode}: {proc.stderr[-2000:]}"
    return json.loads(proc.stdout)


def test_members_take_turns_at_ingest_and_search(members, place):
    group, (first, second) = members
    team = place / "team"  # the group's folder; the first member's command makes the home
    team.mkdir()
    shutil.chown(team, group=group)
    team.chmod(0o2770)
    share = place / "share"
    notes = [("a.md", "glacier"), ("b.md", "harbour"), ("c.md", "orchard"), ("d.md", "canyon")]
    for turn, (name, word) in enumerate(notes):
        writer, reader = (first, second) if turn % 2 == 0 else (second, first)
        write_tree(share, {name: f"# {name}\n\nthe {word} note of turn {turn}\n"})
        subprocess.run(["chmod", "-R", "a+rX", str(share)], check=True)
        summary = _ok(_kbsync(writer, place, group, "ingest", str(share), "--json"),
                      f"turn {turn}: {writer}'s ingest")
        assert summary["failed"] == 0 and summary["added"] == 1, summary
        for who in (reader, writer):
            found = _ok(_kbsync(who, place, group, "search", word, "--json"),
                        f"turn {turn}: {who}'s search")
            assert [hit["doc_id"] for hit in found["results"]][:1] == [f"share/{name}"], found
    _assert_group_usable(place / "team" / "kb", group)


def test_a_member_reads_through_another_members_running_ingest(members, place):
    """The relay of a shared home serves the group: ``run/`` 2770, the socket 0660, the peer
    a member (before, the reader refused a folder and a peer of another uid)."""
    group, (first, second) = members
    team = place / "team"
    team.mkdir()
    shutil.chown(team, group=group)
    team.chmod(0o2770)
    share = place / "share"
    write_tree(share, {f"n{i}.md": f"# Note {i}\n\nrotate the key marker{i}.\n" for i in range(6)})
    subprocess.run(["chmod", "-R", "a+rX", str(share)], check=True)
    stop = place / "stop"
    writer = subprocess.Popen(_command(first, place, group, str(HERE / "relay_writer.py"),
                                       str(share), str(stop)),
                              text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert writer.stdout.readline().strip() == "ready", writer.stderr.read()
        sock = team / "kb" / "run" / "store.sock"
        assert stat.S_IMODE(sock.stat().st_mode) == 0o660
        assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o2770
        found = _ok(_kbsync(second, place, group, "search", "marker3", "--json"),
                    f"{second}'s search during {first}'s ingest")
        assert found["results"][0]["doc_id"] == "share/n3.md"
        assert writer.poll() is None  # read through the relay, not after the writer
    finally:
        stop.touch()
        subprocess.run(["chmod", "a+r", str(stop)], check=False)
        writer.communicate(timeout=120)
    assert writer.returncode == 0


def _assert_group_usable(home: Path, group: str) -> None:
    """Every entry under the home is the group's and usable by it (2770 / 0660)."""
    gid = int(subprocess.check_output(["getent", "group", group]).split(b":")[2])
    wrong = []
    for path in [home, *home.rglob("*")]:
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            continue
        mode = stat.S_IMODE(st.st_mode)
        need = 0o2070 if stat.S_ISDIR(st.st_mode) else 0o060
        if st.st_gid != gid or mode & need != need or mode & 0o007:
            wrong.append(f"{path.relative_to(home)} {mode:04o} gid {st.st_gid}")
    assert not wrong, wrong
    names = {p.name for p in home.rglob("*")}
    assert {"run", "cache.db"} <= names, sorted(names)[:40]
