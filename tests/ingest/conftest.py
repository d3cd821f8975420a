"""Fixtures shared by the ingest tests."""

from __future__ import annotations

from dataclasses import replace

import pytest


@pytest.fixture(params=["edge", "local"])
def adapter_runtime(request, runtime, tmp_path):
    """The hash-embedder runtime on the embedded engine, or on qdrant-client local mode."""
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
