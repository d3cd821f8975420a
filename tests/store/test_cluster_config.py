"""Cluster settings of the server adapter: what reaches qdrant-client, and that local mode
(the conformance backend here) accepts a full cluster layout and write ordering."""

from __future__ import annotations

import os
import uuid

import pytest
from qdrant_client import models

from kbsync.errors import UsageError
from kbsync.settings import Settings
from kbsync.store import DENSE, Filter, Point, open_store
from kbsync.store.server.cluster import ClusterConfig
from kbsync.store.server.store import ServerStore

CLUSTER = ClusterConfig(shards=6, replication_factor=2, write_consistency_factor=2,
                        on_disk_vectors=True, on_disk_payload=True, write_ordering="strong")


def _points(n: int, doc: str) -> list[Point]:
    return [Point(id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{doc}/{i}")),
                  payload={"namespace": "ns", "doc_id": doc, "i": i},
                  vector=[1.0, float(i + 1), 0.5, 0.0]) for i in range(n)]


def test_defaults_leave_the_layout_to_the_server_and_order_writes_through_the_leader():
    config = ClusterConfig()
    assert config.collection_kwargs() == {"on_disk_payload": True}
    assert config.ordering is models.WriteOrdering.MEDIUM
    assert config.dense_params(384).on_disk is None
    assert config.sparse_params().index is None


def test_a_cluster_layout_reaches_create_collection():
    assert CLUSTER.collection_kwargs() == {"shard_number": 6, "replication_factor": 2,
                                           "write_consistency_factor": 2,
                                           "on_disk_payload": True}
    assert CLUSTER.dense_params(384) == models.VectorParams(
        size=384, distance=models.Distance.COSINE, on_disk=True)
    assert CLUSTER.sparse_params().index.on_disk is True
    assert CLUSTER.ordering is models.WriteOrdering.STRONG


@pytest.mark.parametrize("kwargs, message", [
    ({"replication_factor": 2, "write_consistency_factor": 3}, "exceeds the replication"),
    ({"write_consistency_factor": 2}, "exceeds the replication factor 1"),
    ({"shards": 0}, "shards must be at least 1"),
])
def test_a_layout_no_write_could_succeed_on_is_refused(kwargs, message):
    with pytest.raises(UsageError, match=message):
        ClusterConfig(**kwargs)


def test_settings_reach_the_server_store(monkeypatch):
    for key in [k for k in os.environ if k.startswith("KBSYNC_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("KBSYNC_QDRANT_URL", "http://127.0.0.1:9")  # no request until first use
    monkeypatch.setenv("KBSYNC_QDRANT_SHARDS", "6")
    monkeypatch.setenv("KBSYNC_QDRANT_REPLICATION_FACTOR", "2")
    monkeypatch.setenv("KBSYNC_QDRANT_WRITE_CONSISTENCY_FACTOR", "2")
    monkeypatch.setenv("KBSYNC_QDRANT_ON_DISK_VECTORS", "true")
    monkeypatch.setenv("KBSYNC_QDRANT_WRITE_ORDERING", "strong")
    store = open_store(Settings())
    try:
        assert isinstance(store, ServerStore) and store._cluster == CLUSTER
    finally:
        store.close()


def test_local_mode_takes_a_cluster_layout_and_write_ordering(tmp_path):
    """Local mode ignores shards and ordering; every call must still be accepted as is."""
    store = ServerStore.local(tmp_path / "local", cluster=CLUSTER)
    try:
        store.ensure_collection("kb", dimension=4, keyword_indexes=("namespace", "doc_id"),
                                sparse=True, bool_indexes=("flag",), integer_indexes=("i",))
        store.upsert("kb", _points(5, "a") + _points(3, "b"))
        store.delete_ids("kb", [_points(5, "a")[0].id])
        store.delete("kb", Filter.where(namespace="ns", doc_id="b"))
        left = sorted(p.payload["i"] for p in store.scroll("kb"))
        assert left == [1, 2, 3, 4]
    finally:
        store.close()


def test_a_real_server_creates_the_cluster_layout():
    """Against ``KBSYNC_TEST_QDRANT_URL`` (skipped without one): the collection kbsync creates
    has the layout asked for (a single node accepts 2 shards, replication 1)."""
    url = os.environ.get("KBSYNC_TEST_QDRANT_URL")
    if not url:
        pytest.skip("KBSYNC_TEST_QDRANT_URL is unset: no Qdrant server")
    layout = ClusterConfig(shards=2, on_disk_vectors=True)
    name = f"kbt{uuid.uuid4().hex[:10]}_cluster"
    store = ServerStore.from_url(url, os.environ.get("KBSYNC_TEST_QDRANT_API_KEY"),
                                 cluster=layout)
    try:
        store.ensure_collection(name, dimension=4, keyword_indexes=("namespace",), sparse=True)
        store.upsert(name, _points(3, "a"))
        params = store._client.get_collection(name).config.params
        assert params.shard_number == 2 and params.on_disk_payload is True
        assert params.vectors[DENSE].on_disk is True
        assert store.count(name) == 3
    finally:
        store._client.delete_collection(name)
        store.close()
