"""The per-(collection, namespace) write lock."""

from __future__ import annotations

import threading
import time

import pytest

from kbsync.errors import LockHeld
from kbsync.ingest.lock import lock_path, write_lock


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
