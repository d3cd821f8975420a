"""The embedded store's segment layout on a Qdrant server (issue 23): a new collection is
indexed at the seal size and int8-quantized, and dense searches rescore on the originals.

Local mode (the backend here) accepts and ignores the layout, so what reaches qdrant-client
is checked by recording its calls; a real server (``KBSYNC_TEST_QDRANT_URL``) shows it in the
collection's info.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest
from qdrant_client import models

from kbsync.models import SparseVec
from kbsync.store import Point
from kbsync.store import layout
from kbsync.store.server import query as sq
from kbsync.store.server.store import ServerStore

DIM = 8


def _points(n: int) -> list[Point]:
    return [Point(str(uuid.uuid5(uuid.NAMESPACE_URL, f"p{i}")), {"namespace": "ns"},
                  [1.0, float(i + 1), 0.5, 0.0, 0.1, 0.2, 0.3, float(i % 3)],
                  SparseVec([i % 5], [1.0])) for i in range(n)]


def _recording(store: ServerStore, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict]]:
    calls: list[tuple[str, dict]] = []
    for method in ("create_collection", "query_points"):
        real = getattr(store.client, method)

        def record(*args: Any, _real: Any = real, _name: str = method, **kwargs: Any) -> Any:
            calls.append((_name, kwargs))
            return _real(*args, **kwargs)

        monkeypatch.setattr(store.client, method, record)
    return calls


def test_the_layout_values_are_the_embedded_stores():
    assert sq.optimizers_config(384).indexing_threshold == layout.seal_threshold_kb(384)
    scalar = sq.quantization_config().scalar
    assert (scalar.type, scalar.quantile, scalar.always_ram) == (models.ScalarType.INT8,
                                                                 layout.QUANTILE, True)
    params = sq.search_params().quantization
    assert params is not None
    assert (params.rescore, params.oversampling) == (True, layout.OVERSAMPLING)


def test_a_new_collection_gets_the_layout_and_searches_rescore(tmp_path, monkeypatch):
    with ServerStore.local(tmp_path) as store:
        calls = _recording(store, monkeypatch)
        store.ensure_collection("kb", dimension=DIM, sparse=True)
        store.upsert("kb", _points(20))
        assert len(store.search("kb", _points(1)[0].vector, limit=3)) == 3
        assert store.sparse_search("kb", SparseVec([1], [1.0]), limit=3)
    (_, create), = [c for c in calls if c[0] == "create_collection"]
    assert create["optimizers_config"] == sq.optimizers_config(DIM)
    assert create["quantization_config"] == sq.quantization_config()
    dense, sparse = [kw for name, kw in calls if name == "query_points"]
    assert dense["search_params"] == sq.search_params()
    assert sparse.get("search_params") is None  # sparse: exact, nothing to rescore


def test_a_real_server_creates_the_sealed_quantized_layout():
    """Against ``KBSYNC_TEST_QDRANT_URL`` (skipped without one)."""
    url = os.environ.get("KBSYNC_TEST_QDRANT_URL")
    if not url:
        pytest.skip("KBSYNC_TEST_QDRANT_URL is unset: no Qdrant server")
    name = f"kbsync_layout_{uuid.uuid4().hex[:8]}"
    store = ServerStore.from_url(url)
    try:
        store.ensure_collection(name, dimension=DIM, sparse=True)
        store.upsert(name, _points(20))
        config = store.client.get_collection(name).config
        assert config.optimizer_config.indexing_threshold == layout.seal_threshold_kb(DIM)
        assert config.quantization_config == sq.quantization_config()
        assert len(store.search(name, _points(1)[0].vector, limit=3)) == 3
    finally:
        store.drop_collection(name)
        store.close()
