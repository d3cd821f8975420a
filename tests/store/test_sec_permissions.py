"""KBSYNC_HOME belongs to its user (issue 22, "another user on the same machine").

Invariants (docs/SECURITY.md):
- kbsync creates its home and every folder in it 0700, every file 0600, whatever the umask
  (the embedded engine's and the cache's own files included);
- it refuses, in one line naming the path and the fix, a home that group or others can
  use, or that is another user's;
- ``KBSYNC_SHARED_GROUP`` shares it with one group on purpose (2770 / 0660); others and
  other groups are still refused;
- another user cannot open the lock files, so cannot lock its owner out.

Real store, real files, real processes; the other user is made with ``useradd``.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from kbtest import KBSYNC, hash_env, write_tree
from kbsync import home as kbhome
from kbsync.errors import HomeExposed
from kbsync.settings import Settings
from kbsync.store import open_store

# Build a store the way a run does, in its own process under the umask given: ingest a
# small share through the runner (no Prefect server), search it, close.
BUILD = r"""
import os, sys
os.umask(int(sys.argv[1], 8))
from kbsync.runtime import Runtime
from kbsync.ingest.discover import parse_root
from kbsync.ingest.runner import run_plain
from kbsync.settings import Settings
rt = Runtime.open(Settings())
try:
    summary = run_plain([parse_root(sys.argv[2])], runtime=rt)
    assert summary.added == 3, summary
finally:
    rt.close()
"""

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="useradd/groupadd need root")


def _build(home: Path, share: Path, umask: str = "000", **extra: str) -> None:
    write_tree(share, {f"d{i}.md": f"# Secret {i}\n\nchunk text number {i}" for i in range(3)})
    proc = subprocess.run([sys.executable, "-c", BUILD, umask, str(share)], env=hash_env(None, home, **extra),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _modes(home: Path) -> dict[str, int]:
    """Mode of the home and of everything under it (links skipped), by relative path."""
    found = {".": stat.S_IMODE(home.stat().st_mode)}
    for path in home.rglob("*"):
        st = path.lstat()
        if not stat.S_ISLNK(st.st_mode):
            found[str(path.relative_to(home))] = stat.S_IMODE(st.st_mode)
    return found


@pytest.fixture
def other_user():
    """A throwaway local user (removed at teardown)."""
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.skip("needs root and useradd to make another user")
    name = f"kbsec{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], check=False)


@pytest.fixture
def shared_group():
    """A throwaway group (removed at teardown)."""
    if os.geteuid() != 0 or not shutil.which("groupadd"):
        pytest.skip("needs root and groupadd")
    name = f"kbgrp{uuid.uuid4().hex[:8]}"
    subprocess.run(["groupadd", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["groupdel", name], check=False)


@pytest.fixture
def open_dir():
    """A folder every user can enter (pytest's tmp folders are 0700): only the home's own
    modes stand between another user and the index."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="kbsec-", dir="/tmp"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _as(user: str, code: str, *args: str) -> subprocess.CompletedProcess:
    """Run python ``code`` as ``user`` (the system interpreter: the venv is root's)."""
    python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    return subprocess.run(["runuser", "-u", user, "--", python, "-I", "-c", code, *args],
                          capture_output=True, text=True, timeout=60)


def test_kbsync_makes_its_home_private_whatever_the_umask(tmp_path) -> None:
    home = tmp_path / "home"
    _build(home, tmp_path / "share", umask="000")
    modes = _modes(home)
    assert {"qdrant", "cache", "locks"} <= set(modes), sorted(modes)
    assert any(p.startswith("qdrant/kbsync/") for p in modes), "the engine wrote no files?"
    wrong = {p: oct(m) for p, m in modes.items()
             if m != (0o700 if (home / p).is_dir() else 0o600)}
    assert not wrong, wrong


def test_a_home_others_can_read_is_refused_naming_the_path_and_the_fix(tmp_path) -> None:
    home = tmp_path / "home"
    _build(home, tmp_path / "share", umask="077")
    settings = Settings(home=home, qdrant_url=None)
    open_store(settings).close()  # private: opens

    payload = next(p for p in (home / "qdrant").rglob("*") if p.is_file())
    payload.chmod(0o644)  # the state a store made before this change was in
    with pytest.raises(HomeExposed) as err:
        open_store(settings)
    message = str(err.value)
    assert "\n" not in message
    assert str(payload) in message and "group and others" in message
    assert f"chmod -R go-rwx {home}" in message and "KBSYNC_SHARED_GROUP" in message

    payload.chmod(0o600)
    home.chmod(0o750)
    kbhome.reset()
    with pytest.raises(HomeExposed, match=r"is open to group \(mode 0750\)"):
        open_store(settings)


def test_the_cli_refuses_an_exposed_home_in_one_line(tmp_path) -> None:
    home = tmp_path / "home"
    _build(home, tmp_path / "share", umask="077")
    subprocess.run(["chmod", "-R", "go+rX", str(home)], check=True)  # as a umask 022 left it
    proc = subprocess.run([KBSYNC, "search", "secret"], env=hash_env(None, home), capture_output=True,
                          text=True, timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1, proc.stderr
    assert lines == [f"kbsync: HomeExposed: {home} is open to group and others (mode 0755): "
                     "kbsync refuses a home other users can read or write; run `chmod -R "
                     f"go-rwx {home}` (or set KBSYNC_SHARED_GROUP to share it with one group "
                     "on purpose)"], lines
    assert "Secret" not in proc.stdout

    subprocess.run(["chmod", "-R", "go-rwx", str(home)], check=True)  # the fix it names
    proc = subprocess.run([KBSYNC, "search", "secret"], env=hash_env(None, home), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Secret" in proc.stdout


def test_an_existing_home_is_never_loosened_or_chmodded_by_opening(tmp_path) -> None:
    """The refusal changes nothing: the person decides (as PostgreSQL does)."""
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    with pytest.raises(HomeExposed, match="group and others"):
        open_store(Settings(home=home, qdrant_url=None))
    assert stat.S_IMODE(home.stat().st_mode) == 0o755 and not (home / "qdrant").exists()


@needs_root
def test_a_home_of_another_user_is_refused(tmp_path, other_user) -> None:
    home = tmp_path / "home"
    kbhome.open_home(home)
    os.chown(home, int(subprocess.check_output(["id", "-u", other_user])), -1)
    kbhome.reset()
    with pytest.raises(HomeExposed, match=f"belongs to {other_user}, not to root"):
        open_store(Settings(home=home, qdrant_url=None))


@needs_root
def test_another_user_can_neither_read_the_index_nor_take_its_locks(open_dir, tmp_path,
                                                                      other_user) -> None:
    home = open_dir / "home"
    _build(home, tmp_path / "share", umask="022")
    files = [p for p in home.rglob("*") if p.is_file()]
    locks = [home / "locks" / "embedded-store.all.lock", home / "qdrant" / ".lock"]
    assert all(lock in files for lock in locks)
    probe = ("import fcntl, sys\n"
             "opened = []\n"
             "for p in sys.argv[1:]:\n"
             "    try:\n"
             "        f = open(p, 'rb'); fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)\n"
             "        opened.append(p)\n"
             "    except OSError:\n"
             "        pass\n"
             "print(len(opened))\n")
    proc = _as(other_user, probe, *map(str, files))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0", f"{other_user} opened {proc.stdout} of {len(files)}"
    listing = _as(other_user, "import os, sys; os.listdir(sys.argv[1])", str(home))
    assert listing.returncode != 0 and "PermissionError" in listing.stderr


@needs_root
def test_a_shared_group_on_purpose(open_dir, tmp_path, shared_group, other_user) -> None:
    home = open_dir / "home"
    _build(home, tmp_path / "share", umask="022", KBSYNC_SHARED_GROUP=shared_group)
    gid = int(subprocess.check_output(["getent", "group", shared_group]).split(b":")[2])
    for path in [home, *home.rglob("*")]:
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            continue
        mode = stat.S_IMODE(st.st_mode)
        assert st.st_gid == gid, path
        assert mode & 0o007 == 0, (path, oct(mode))
        if stat.S_ISDIR(st.st_mode):
            assert mode & stat.S_ISGID, (path, oct(mode))  # new files get the group
    assert stat.S_IMODE(home.stat().st_mode) == 0o2770
    assert stat.S_IMODE((home / "locks" / "embedded-store.all.lock").stat().st_mode) == 0o660

    # A member of the group reads the index; a user outside it still cannot.
    subprocess.run(["usermod", "-a", "-G", shared_group, other_user], check=True)
    payload = next(p for p in (home / "qdrant").rglob("*") if p.is_file())
    read = _as(other_user, "import sys; open(sys.argv[1], 'rb').read(1)", str(payload))
    assert read.returncode == 0, read.stderr

    settings = Settings(home=home, qdrant_url=None, shared_group=shared_group)
    open_store(settings).close()
    payload.chmod(0o664)  # others may read: still refused
    kbhome.reset()
    with pytest.raises(HomeExposed, match=r"open to others .*chmod -R o-rwx"):
        open_store(settings)
    payload.chmod(0o660)
    os.chown(payload, -1, 0)  # open to a group that is not the shared one
    kbhome.reset()
    with pytest.raises(HomeExposed, match=f"not the shared group {shared_group}.*chgrp -R"):
        open_store(settings)


def test_an_unknown_shared_group_is_one_line(tmp_path) -> None:
    with pytest.raises(HomeExposed, match="KBSYNC_SHARED_GROUP='no-such-group-kb' names no "
                                          "group"):
        open_store(Settings(home=tmp_path / "home", qdrant_url=None,
                            shared_group="no-such-group-kb"))


def test_the_active_pointer_is_the_homes_whatever_the_umask(tmp_path) -> None:
    from kbsync.store.active import ActiveRecord, write_pointer

    home = tmp_path / "home"
    os.umask(0)  # the autouse fixture restores the session's umask
    open_store(Settings(home=home, qdrant_url=None)).close()
    path = write_pointer(home, ActiveRecord("kbsync", "kbsync__r1"))
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@needs_root
def test_the_active_pointer_of_a_shared_home_is_the_groups(tmp_path, shared_group) -> None:
    from kbsync.store.active import ActiveRecord, write_pointer

    home = tmp_path / "home"
    open_store(Settings(home=home, qdrant_url=None, shared_group=shared_group)).close()
    path = write_pointer(home, ActiveRecord("kbsync", "kbsync__r1"))
    gid = int(subprocess.check_output(["getent", "group", shared_group]).split(b":")[2])
    assert path.stat().st_gid == gid and stat.S_IMODE(path.stat().st_mode) == 0o660
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o2770


@needs_root
def test_a_shared_home_left_member_private_is_healed_by_its_owner(tmp_path, shared_group) -> None:
    """What kbsync before issue 37 left: ``run/`` 2700, the cache database 0640 (issue 37).
    The owner's next open gives the group what the owner has; others get nothing."""
    home = tmp_path / "home"
    settings = Settings(home=home, qdrant_url=None, shared_group=shared_group)
    open_store(settings).close()
    run, cache = home / "run", home / "cache"
    run.mkdir(mode=0o700)
    run.chmod(0o2700)
    cache.mkdir(mode=0o2770)
    (cache / "cache.db").write_bytes(b"")
    (cache / "cache.db").chmod(0o640)
    kbhome.reset()
    open_store(settings).close()
    assert stat.S_IMODE(run.stat().st_mode) == 0o2770
    assert stat.S_IMODE((cache / "cache.db").stat().st_mode) == 0o660


@needs_root
def test_the_cache_database_of_a_shared_home_is_the_groups(tmp_path, shared_group) -> None:
    from kbsync.embed import build_embedding_service

    home = tmp_path / "home"
    build_embedding_service(Settings(home=home, qdrant_url=None, shared_group=shared_group,
                                     embed_provider="hash"))
    database = home / "cache" / "cache.db"
    assert stat.S_IMODE(database.stat().st_mode) == 0o660
    assert database.stat().st_gid == int(
        subprocess.check_output(["getent", "group", shared_group]).split(b":")[2])
