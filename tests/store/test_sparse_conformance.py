"""Sparse vectors, once per VectorStore adapter (see ``conftest.BACKENDS``).

Invariants of ``kbsync/store/base.py`` under test: ``sparse=True`` collections
carry an IDF sparse vector (added to older collections on ensure); sparse
scores are ``sum(idf * weight)`` with Qdrant's IDF, filtered like dense ones;
malformed sparse vectors are refused before any write. Hybrid search fuses a
dense and a sparse query above the store (``tests/query/test_fusion.py``).
"""

from __future__ import annotations

import json
import math

import pytest

from kbsync.errors import DimensionMismatch, InvalidVector, StoreError, StoreUnavailable
from kbsync.models import SparseVec
from kbsync.store import Filter, Point
from kbsync.store.server.store import ServerStore
from test_conformance import DIM, INDEXES, fake_qdrant, pid, unit  # noqa: F401 - a fixture


def sv(*pairs: tuple[int, float]) -> SparseVec:
    return SparseVec([i for i, _ in pairs], [v for _, v in pairs])


def spoint(n: int, sparse: SparseVec | None, namespace: str = "ns-a", **extra) -> Point:
    return Point(pid(n), {"namespace": namespace, "n": n, **extra}, unit(n), sparse)


@pytest.fixture
def scoll(store, backend) -> str:
    name = backend.name("sp")
    store.ensure_collection(name, dimension=DIM, keyword_indexes=INDEXES, sparse=True,
                            bool_indexes=("embedding_failed",))
    return name


def idf(df: int, n: int) -> float:
    """Qdrant's IDF modifier."""
    return math.log((n - df + 0.5) / (df + 0.5) + 1.0)


def test_sparse_search_scores_are_idf_times_weight(store, scoll) -> None:
    # Term 1 in 3 of 4 points, term 2 in one, term 3 in two.
    store.upsert(scoll, [spoint(0, sv((1, 1.0), (2, 2.0))), spoint(1, sv((1, 0.5), (3, 1.0))),
                         spoint(2, sv((1, 1.5))), spoint(3, sv((3, 3.0)))])
    hits = store.sparse_search(scoll, sv((1, 1.0), (2, 1.0)), limit=10)
    expected = {pid(0): 1.0 * idf(3, 4) + 2.0 * idf(1, 4), pid(1): 0.5 * idf(3, 4),
                pid(2): 1.5 * idf(3, 4)}
    assert {h.id: h.score for h in hits} == pytest.approx(expected, rel=1e-4)
    assert [h.id for h in hits] == [pid(0), pid(2), pid(1)]
    assert hits[0].payload["n"] == 0


def test_flagged_points_are_excluded_in_every_query(store, scoll) -> None:
    flagged = Point(pid(1), {"namespace": "ns-a", "embedding_failed": True}, [0.0] * DIM,
                    sv((9, 5.0)))
    store.upsert(scoll, [flagged, spoint(2, sv((9, 1.0)), embedding_failed=False)])
    flt = Filter.where(namespace="ns-a").and_not("embedding_failed", True)
    assert [h.id for h in store.sparse_search(scoll, sv((9, 1.0)), limit=5, flt=flt)] == [pid(2)]
    assert [h.id for h in store.search(scoll, unit(1), limit=5, flt=flt)] == [pid(2)]


def test_empty_sparse_vectors(store, scoll) -> None:
    store.upsert(scoll, [spoint(1, SparseVec([], [])), spoint(2, sv((3, 1.0))), spoint(3, None)])
    assert store.count(scoll) == 3
    assert store.sparse_search(scoll, SparseVec([], []), limit=5) == []
    assert [h.id for h in store.sparse_search(scoll, sv((3, 1.0)), limit=5)] == [pid(2)]


def test_upsert_replaces_the_sparse_vector(store, scoll) -> None:
    store.upsert(scoll, [spoint(1, sv((3, 1.0))), spoint(2, sv((4, 1.0)))])
    store.upsert(scoll, [spoint(1, sv((4, 2.0)))])
    assert [h.id for h in store.sparse_search(scoll, sv((4, 1.0)), limit=5)] == [pid(1), pid(2)]
    assert store.sparse_search(scoll, sv((3, 1.0)), limit=5) == []
    store.upsert(scoll, [spoint(2, None)])  # written without one: it has none now
    assert [h.id for h in store.sparse_search(scoll, sv((4, 1.0)), limit=5)] == [pid(1)]


@pytest.mark.parametrize("bad", [
    SparseVec([1, 1], [1.0, 2.0]),       # repeated index
    SparseVec([-1], [1.0]),              # negative
    SparseVec([2**32], [1.0]),           # over u32
    SparseVec([1, 2], [1.0]),            # lengths differ
    SparseVec([1], [float("nan")]),      # not finite
    SparseVec([True], [1.0]),            # a bool is not an index
])
def test_malformed_sparse_refused_before_any_write(store, scoll, bad) -> None:
    with pytest.raises(InvalidVector):
        store.upsert(scoll, [spoint(1, sv((1, 1.0))), spoint(2, bad)])
    assert store.count(scoll) == 0
    with pytest.raises(InvalidVector):
        store.sparse_search(scoll, bad, limit=3)


def test_a_sparse_collection_validates_the_dense_query(store, scoll) -> None:
    store.upsert(scoll, [spoint(1, sv((1, 1.0)))])
    with pytest.raises(DimensionMismatch):
        store.search(scoll, [1.0] * (DIM + 1), limit=3)


def test_collection_without_sparse_vector(store, backend, reopen) -> None:
    name = backend.name("old")
    store.ensure_collection(name, dimension=DIM, keyword_indexes=INDEXES)  # as before hybrid
    store.upsert(name, [spoint(1, None)])
    with pytest.raises(StoreError, match="no sparse vector"):
        store.upsert(name, [spoint(2, sv((1, 1.0)))])
    with pytest.raises(StoreError, match="no sparse vector"):
        store.sparse_search(name, sv((1, 1.0)), limit=3)
    assert store.count(name) == 1
    # ensure with sparse=True adds it; old points stay (without a sparse vector).
    store.ensure_collection(name, dimension=DIM, keyword_indexes=INDEXES, sparse=True)
    store.upsert(name, [spoint(2, sv((1, 1.0)))])
    store = reopen(store)
    store.ensure_collection(name, dimension=DIM, keyword_indexes=INDEXES, sparse=True)
    assert store.count(name) == 2
    assert [h.id for h in store.sparse_search(name, sv((1, 1.0)), limit=3)] == [pid(2)]
    assert {h.id for h in store.search(name, unit(1), limit=3)} == {pid(1), pid(2)}


def test_sparse_collection_survives_reopen(store, scoll, reopen) -> None:
    store.upsert(scoll, [spoint(n, sv((n, 1.0), (100, 0.5))) for n in range(5)])
    store = reopen(store)
    store.ensure_collection(scoll, dimension=DIM, keyword_indexes=INDEXES)  # sparse not asked
    store.ensure_collection(scoll, dimension=DIM, keyword_indexes=INDEXES, sparse=True,
                            bool_indexes=("embedding_failed",))  # idempotent
    assert [h.id for h in store.sparse_search(scoll, sv((3, 1.0)), limit=3)] == [pid(3)]
    assert store.search(scoll, unit(3), limit=1)[0].id == pid(3)


def test_missing_collection_reads_empty(store, backend) -> None:
    name = backend.name("absent")
    assert store.sparse_search(name, sv((1, 1.0)), limit=3) == []
    assert store.search(name, unit(1), limit=3) == []


# --- server adapter against canned HTTP answers (no Qdrant server needed) -----------
def _info(sparse: dict | None) -> bytes:
    params: dict = {"vectors": {"dense": {"size": DIM, "distance": "Cosine"}}, "shard_number": 1,
                    "replication_factor": 1, "write_consistency_factor": 1,
                    "on_disk_payload": True}
    if sparse is not None:
        params["sparse_vectors"] = sparse
    info = {"status": "green", "optimizer_status": "ok", "segments_count": 1, "points_count": 0,
            "indexed_vectors_count": 0, "payload_schema": {}, "config": {
                "params": params,
                "hnsw_config": {"m": 16, "ef_construct": 100, "full_scan_threshold": 10000},
                "optimizer_config": {"deleted_threshold": 0.2, "vacuum_min_vector_number": 1000,
                                     "default_segment_number": 0, "flush_interval_sec": 5},
                "wal_config": {"wal_capacity_mb": 32, "wal_segments_ahead": 0}}}
    return json.dumps({"result": info, "status": "ok", "time": 0.0}).encode()


def test_server_that_cannot_add_the_sparse_vector_says_what_to_do(fake_qdrant) -> None:
    url, routes = fake_qdrant
    routes["/collections/kb"] = (200, {}, _info(None))
    routes["/collections/kb/vectors/sparse"] = (404, {}, b"<html>no such route</html>")
    with ServerStore.from_url(url) as store:
        with pytest.raises(StoreError, match="re-ingest with --force") as info:
            store.ensure_collection("kb", dimension=DIM, sparse=True)
        assert not isinstance(info.value, StoreUnavailable)
        with pytest.raises(StoreError, match="no sparse vector"):
            store.sparse_search("kb", sv((1, 1.0)), limit=3)
    routes["/collections/kb/vectors/sparse"] = (503, {}, b'{"status":{"error":"busy"}}')
    with ServerStore.from_url(url) as store, pytest.raises(StoreUnavailable):
        store.ensure_collection("kb", dimension=DIM, sparse=True)


def test_server_sparse_vector_without_idf_is_refused(fake_qdrant) -> None:
    url, routes = fake_qdrant
    routes["/collections/kb"] = (200, {}, _info({"sparse": {}}))
    with ServerStore.from_url(url) as store, pytest.raises(StoreError, match="IDF"):
        store.ensure_collection("kb", dimension=DIM, sparse=True)
