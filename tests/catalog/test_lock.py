"""The per-(collection, namespace) write lock."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time

import pytest

from kbsync.errors import LockHeld
from kbsync.catalog.lock import lock_path, probe, write_lock


def test_second_writer_is_refused_with_the_holders_pid(tmp_path):
    path = lock_path(tmp_path, "kbsync", "team/a")
    assert path.name == "kbsync.team_a.lock"
    with write_lock(path):
        with pytest.raises(LockHeld, match=r"pid \d+"):
            with write_lock(path):
                pass
    with write_lock(path):  # released on exit
        pass


def test_waiting_writer_gets_the_lock_when_released(tmp_path, caplog):
    path = lock_path(tmp_path, "kbsync", "default")
    held = threading.Event()

    def hold():
        with write_lock(path):
            held.set()
            time.sleep(0.6)

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait(5)
    started = time.monotonic()
    with write_lock(path, timeout_s=10, poll_s=0.05):
        waited = time.monotonic() - started
    thread.join()
    assert waited >= 0.3
    assert "waiting for the write lock" in caplog.text


def test_namespaces_lock_independently(tmp_path):
    with write_lock(lock_path(tmp_path, "kbsync", "a")):
        with write_lock(lock_path(tmp_path, "kbsync", "b")):
            pass


def test_refusal_names_purpose_namespace_pid_and_since_and_refuses_at_once(tmp_path):
    path = lock_path(tmp_path, "kbsync", "default")
    with write_lock(path, namespace="team", purpose="remove"):
        holder = probe(path)
        assert holder is not None and holder.pid == str(os.getpid())
        assert (holder.purpose, holder.namespace) == ("remove", "team")
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", holder.since or "")
        started = time.monotonic()
        with pytest.raises(LockHeld) as refused, write_lock(path, timeout_s=0, poll_s=5):
            pass
        assert time.monotonic() - started < 1  # 0 refuses at once, without one poll
    line = str(refused.value)
    assert "\n" not in line
    assert line.startswith(f"a remove of namespace 'team' (pid {os.getpid()}) is writing "
                           f"this collection and namespace since {holder.since}; "
                           "set KBSYNC_LOCK_TIMEOUT_S")
    assert probe(path) is None  # released, and the record stays harmlessly


def test_a_waiting_writer_is_refused_after_its_timeout(tmp_path):
    path = lock_path(tmp_path, "kbsync", "default")
    with write_lock(path, purpose="ingest"):
        started = time.monotonic()
        with (pytest.raises(LockHeld, match=r"^an ingest \(pid \d+\) .*; waited 0.3 s"),
              write_lock(path, timeout_s=0.3, poll_s=0.05)):
            pass
        assert 0.3 <= time.monotonic() - started < 2


def test_probe_creates_nothing(tmp_path):
    path = lock_path(tmp_path, "kbsync", "default")
    assert probe(path) is None and not path.parent.exists()


HOLD = """
import sys, time
from pathlib import Path
from kbsync.catalog.lock import write_lock
with write_lock(Path(sys.argv[1]), namespace="default", purpose="ingest"):
    print("held", flush=True)
    time.sleep(120)
"""


def test_a_sigkilled_holder_leaves_the_lock_free(tmp_path):
    """The OS drops a dead holder's flock: no stale lock after a crash, whatever the record says."""
    path = lock_path(tmp_path, "kbsync", "default")
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        holder = probe(path)
        assert holder is not None and holder.pid == str(child.pid)
        with pytest.raises(LockHeld, match=f"pid {child.pid}"), write_lock(path):
            pass
    finally:
        child.kill()  # SIGKILL: no finally, no atexit in the holder
        child.wait(30)
    assert probe(path) is None
    with write_lock(path):  # timeout 0: would be refused if anything were left held
        assert probe(path).pid == str(os.getpid())
