"""The run lock against a Qdrant server: a Prefect global concurrency limit per namespace."""

from __future__ import annotations

import pytest
from prefect import flow
from prefect.client.orchestration import get_client

from kbsync.errors import LockHeld
from tasks.locking import limit_name, run_lock


def test_server_mode_creates_and_holds_a_global_concurrency_limit(prefect_api, settings,
                                                                 monkeypatch):
    from kbsync.settings import Settings

    monkeypatch.setenv("KBSYNC_QDRANT_URL", "http://127.0.0.1:9")  # never contacted here
    # The holder takes a free limit: given time for the round trips on a loaded machine (a 1 s
    # bound timed out there); only the second writer's wait is bounded tight.
    monkeypatch.setenv("KBSYNC_LOCK_TIMEOUT_S", "120")
    server_settings = Settings()
    monkeypatch.setenv("KBSYNC_LOCK_TIMEOUT_S", "1")
    waiting_settings = Settings()
    name = limit_name(server_settings, "Team A")
    assert name == "kbsync-write-kbsync-team-a" == limit_name(waiting_settings, "Team A")

    @flow
    def hold_twice() -> None:
        # a pointer writer's purpose: it reads the pointer itself, so the fake server is
        # never contacted and the lock alone is under test
        with run_lock(server_settings, "Team A", purpose="rebuild"):
            with get_client(sync_client=True) as client:
                limit = client.read_global_concurrency_limit_by_name(name)
            assert limit.limit == 1 and limit.active_slots == 1
            with pytest.raises(LockHeld, match=name):
                with run_lock(waiting_settings, "Team A"):
                    pass

    hold_twice()
    with get_client(sync_client=True) as client:
        assert client.read_global_concurrency_limit_by_name(name).active_slots == 0


def test_server_mode_with_no_wait_refuses_at_once(prefect_api, settings, monkeypatch):
    """KBSYNC_LOCK_TIMEOUT_S=0 refuses a held limit (Prefect's None timeout waited forever)."""
    import threading
    import time

    from kbsync.settings import Settings

    monkeypatch.setenv("KBSYNC_QDRANT_URL", "http://127.0.0.1:9")  # never contacted here
    monkeypatch.setenv("KBSYNC_LOCK_TIMEOUT_S", "120")  # the holder: see the test above
    server_settings = Settings()
    monkeypatch.setenv("KBSYNC_LOCK_TIMEOUT_S", "0")
    waiting_settings = Settings()
    outcome: dict = {}

    @flow
    def hold_twice() -> None:
        with run_lock(server_settings, "Team B", purpose="rebuild"):  # see the test above
            def second() -> None:
                started = time.monotonic()
                try:
                    with run_lock(waiting_settings, "Team B"):
                        outcome["error"] = None
                except LockHeld as exc:
                    outcome["error"] = str(exc)
                outcome["waited"] = time.monotonic() - started

            # The limit is taken before the lock file, so it is the limit that refuses.
            worker = threading.Thread(target=second, daemon=True)
            worker.start()
            worker.join(60)
            assert not worker.is_alive(), "a held limit with timeout 0 waited forever"

    hold_twice()
    assert outcome["error"] and "'Team B'" in outcome["error"]
    assert outcome["waited"] < 30
