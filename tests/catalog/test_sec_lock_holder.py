"""``LockHeld`` names the live holder of the write lock, never a finished run (issue 22).

The holder record in a lock file outlives its writer; anyone who can open the file
can ``flock`` it without writing one. So a refusal must believe the record only when
its pid holds the lock now. Real lock files, real processes (one records itself
through ``write_lock`` and exits; another holds the flock without a record, as
``flock(1)`` or another user would); each waits on the event itself (a line on
its stdout once it holds the lock), never on a sleep.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kbsync.errors import LockHeld
from kbsync.catalog import lockfile as lockmod  # where the lock file is taken
from kbsync.catalog.lock import probe, write_lock

RECORD_AND_EXIT = r"""
import sys
from pathlib import Path
from kbsync.catalog.lock import write_lock
with write_lock(Path(sys.argv[1]), namespace="old-run", purpose="ingest"):
    pass
"""

# Hold the flock (no record: like `flock FILE sleep`, or another user with read access),
# or, with "record", hold it through write_lock; say so on stdout, then wait for stdin.
HOLD = r"""
import fcntl, sys
from pathlib import Path
path = Path(sys.argv[1])
if sys.argv[2] == "record":
    from kbsync.catalog.lock import write_lock
    held = write_lock(path, namespace="live-run", purpose="ingest")
    held.__enter__()
else:
    handle = open(path, "rb")
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("held", flush=True)
sys.stdin.readline()
"""


def _finished_run(path: Path) -> int:
    """Run a writer that records itself and ends; its (now dead) pid."""
    proc = subprocess.run([sys.executable, "-c", RECORD_AND_EXIT, str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    recorded = json.loads(path.read_text())
    assert recorded["namespace"] == "old-run"
    return recorded["pid"]


class _Holder:
    """A process holding ``path`` until the block ends."""

    def __init__(self, path: Path, how: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path), how],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def __enter__(self) -> subprocess.Popen:
        assert self.proc.stdout.readline().strip() == "held"  # the event: it holds the lock
        return self.proc

    def __exit__(self, *exc) -> None:
        self.proc.communicate("go\n", timeout=60)


def test_a_finished_runs_pid_is_never_named(tmp_path) -> None:
    path = tmp_path / "locks" / "embedded-store.all.lock"
    stale = _finished_run(path)
    with _Holder(path, "bare") as holder:
        with pytest.raises(LockHeld) as err:
            with write_lock(path, scope="the store"):
                pass
        assert probe(path) is not None and probe(path).pid == str(holder.pid)
    message = str(err.value)
    assert f"pid {stale}" not in message and "old-run" not in message
    assert f"another process ('python" in message and f"pid {holder.pid})" in message
    assert "wrote no holder record" in message and "\n" not in message


def test_a_live_kbsync_holder_is_named_with_its_record(tmp_path) -> None:
    path = tmp_path / "x.lock"
    _finished_run(path)
    with _Holder(path, "record") as holder:
        with pytest.raises(LockHeld) as err:
            with write_lock(path, scope="the store"):
                pass
    assert str(err.value).startswith(
        f"an ingest of namespace 'live-run' (pid {holder.pid}) is writing the store since ")


def test_without_proc_locks_a_dead_recorded_pid_is_not_named(tmp_path, monkeypatch) -> None:
    """Where the kernel cannot be asked, a record is believed only while its pid lives."""
    path = tmp_path / "x.lock"
    stale = _finished_run(path)
    monkeypatch.setattr(lockmod, "_flock_pids", lambda _path: None)
    with _Holder(path, "bare"):
        with pytest.raises(LockHeld) as err:
            with write_lock(path):
                pass
    assert f"pid {stale}" not in str(err.value)
    assert "another process (not named: the lock file's record is of a finished run)" \
        in str(err.value)


def test_the_lock_file_is_private_whatever_the_umask(tmp_path) -> None:
    import os
    import stat

    old = os.umask(0)
    try:
        with write_lock(tmp_path / "locks" / "a.lock"):
            pass
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "locks").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "locks" / "a.lock").stat().st_mode) == 0o600
