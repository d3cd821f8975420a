"""Hybrid search fuses ids and scores, then fetches the payloads of the kept only (issue 23).

``kbsync.query.search`` asks the embedded store for ``FUSION_DEPTH`` dense and sparse
candidates without payloads and fetches the payloads of the fused ``limit``: the results
and their order are those of fusing the candidates with their payloads.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kbsync.query.fusion import FUSION_DEPTH, fuse, fusion_for
from kbsync.query.search import with_payloads
from kbsync.models import SparseVec
from kbsync.store import Point
from kbsync.store.edge.store import EdgeStore


def _store(tmp_path: Path, n: int = 600, dim: int = 32) -> tuple[EdgeStore, np.ndarray]:
    rng = np.random.default_rng(4)
    vectors = rng.standard_normal((n, dim), dtype=np.float32)
    store = EdgeStore(tmp_path)
    store.ensure_collection("kb", dimension=dim, keyword_indexes=("namespace",), sparse=True)
    store.upsert("kb", [Point(f"00000000-0000-0000-0000-{i + 1:012d}",
                              {"namespace": "a", "text": f"chunk {i}", "i": i},
                              vectors[i].tolist(), SparseVec([i % 13, 20 + i % 7], [1.0, 0.5]))
                        for i in range(n)])
    return store, vectors


def test_fusing_bare_candidates_then_fetching_payloads_gives_the_same_results(
        tmp_path: Path) -> None:
    store, vectors = _store(tmp_path)
    weights = fusion_for("a query", provider="hash", model="hash")
    sparse = SparseVec([3, 22], [1.0, 1.0])
    with store:
        for q in vectors[:20]:
            full = fuse(store.search("kb", q.tolist(), limit=FUSION_DEPTH),
                        store.sparse_search("kb", sparse, limit=FUSION_DEPTH), weights, limit=20)
            bare_dense = store.search("kb", q.tolist(), limit=FUSION_DEPTH, with_payload=False)
            assert all(p.payload == {} for p in bare_dense)
            bare = fuse(bare_dense, store.sparse_search("kb", sparse, limit=FUSION_DEPTH,
                                                        with_payload=False), weights, limit=20)
            assert with_payloads(store.payloads, "kb", bare) == full


def test_a_point_deleted_before_its_payload_is_fetched_is_left_out(tmp_path: Path) -> None:
    store, vectors = _store(tmp_path)
    with store:
        hits = store.search("kb", vectors[0].tolist(), limit=5, with_payload=False)
        store.delete_ids("kb", [hits[1].id])
        kept = with_payloads(store.payloads, "kb", hits)
        assert [p.id for p in kept] == [hits[0].id] + [h.id for h in hits[2:]]
        assert kept[0].payload["i"] == 0
