"""Shared fixtures: isolated settings, a hash-embedder runtime, small shares."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "kbsync")


@pytest.fixture(scope="session")
def prefect_api():
    """The API URL of one ``prefect_test_harness`` server for the whole session (one per
    xdist worker): it takes 10-30 s to start on 2 cores, so no test starts its own unless
    it kills or reconfigures it (tests/ops, tests/flows/test_prefect_api_loss.py)."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield PREFECT_API_URL.value()


# The worker's umask when the session began (read by setting one, then put back).
SESSION_UMASK = os.umask(0o022)
os.umask(SESSION_UMASK)


@pytest.fixture(autouse=True)
def _umask_per_test():
    """Each test starts from the session's umask: opening a home sets the process's
    (kbsync.home), which would otherwise leak into the tests that follow. Set, not read: a
    module- or session-scoped fixture that opened a home in this process ran before this
    fixture, and reading the umask here kept its 077 for every later test of the worker
    (a share root made by one of them was then closed to every other user)."""
    os.umask(SESSION_UMASK)
    yield
    os.umask(SESSION_UMASK)
    from kbsync import home

    home.reset()


@pytest.fixture
def settings(tmp_path, monkeypatch):
    """Settings isolated under tmp_path, hash embeddings (fast, deterministic)."""
    from kbsync.settings import Settings

    for key in list(os.environ):
        if key.startswith("KBSYNC_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("KBSYNC_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KBSYNC_EMBED_PROVIDER", "hash")
    # In-process conversion keeps these tests fast; the isolated default (worker processes)
    # is exercised by the flow, CLI and crash tests.
    monkeypatch.setenv("KBSYNC_CONVERT_ISOLATION", "false")
    return Settings()


@pytest.fixture
def runtime(settings):
    from kbsync.runtime import Runtime

    rt = Runtime.open(settings)
    yield rt
    rt.close()


@pytest.fixture(params=["edge", "local"])
def adapter_runtime(request, runtime, tmp_path):
    """The hash-embedder runtime on the embedded engine, or on qdrant-client local mode
    (the ingest and catalog tests run their rules on both adapters)."""
    if request.param == "edge":
        yield runtime
        return
    from kbsync.catalog.state import StateStore
    from kbsync.store.server.store import ServerStore

    store = ServerStore.local(tmp_path / "qdrant-local")
    try:
        yield replace(runtime, store=store,
                      states=StateStore(store, runtime.settings.state_collection))
    finally:
        store.close()


@pytest.fixture
def live_kb(settings, tmp_path):
    """``kbtest.topic_share`` ingested into the live collection (plain loop), then closed:
    the settings, the labelled queries (``kbtest.topic_queries``) and the share."""
    from kbsync.ingest.discover import parse_root
    from kbsync.ingest.runner import run_plain
    from kbsync.runtime import Runtime
    from kbtest import TOPICS, topic_queries, topic_share

    share = topic_share(tmp_path / "share", sites=True)
    runtime = Runtime.open(settings)
    try:
        assert run_plain([parse_root(f"share={share}")], runtime=runtime).added == len(TOPICS)
    finally:
        runtime.close()
    return settings, topic_queries(tmp_path / "q.jsonl"), share
