"""The embedded engine's optimizer settings (``edge.seal.optimizers_config``).

kbsync collections never build an HNSW graph (``HnswIndexConfig(m=0)``): the engine
would build it only inside ``optimize()``, holding the GIL for minutes at 100k
points. Segments seal at ``edge.seal.SEAL_EVERY`` points (``indexing_threshold`` and
``max_segment_size``). The settings are written on create and given on every open, so
a shard made before them gets them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import qdrant_edge as qe

from kbsync.models import SparseVec
from kbsync.store import Point
from kbsync.store.base import DENSE, SPARSE
from kbsync.store.edge.store import EdgeStore
from kbsync.store.edge.query import CONFIG_FILE
from kbsync.store.edge.seal import seal_threshold_kb


def _optimizers(folder: Path) -> dict:
    return json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))["optimizers"]


def _points(n: int, dim: int) -> list[Point]:
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((n, dim), dtype=np.float32)
    return [Point(f"00000000-0000-0000-0000-{i + 1:012d}", {"namespace": "a"},
                  vectors[i].tolist(), SparseVec([i % 97, 1000 + i % 13], [1.0, 0.5]))
            for i in range(n)]


def test_a_new_collection_persists_the_optimizer_settings(tmp_path: Path) -> None:
    with EdgeStore(tmp_path) as store:
        store.ensure_collection("kb", dimension=8, sparse=True)
    threshold = seal_threshold_kb(8)
    assert _optimizers(tmp_path / "kb") == {
        "deleted_threshold": None, "vacuum_min_vector_number": None,
        "default_segment_number": None, "max_segment_size": threshold,
        "indexing_threshold": threshold, "prevent_unoptimized": False}


def test_an_older_shard_gets_the_settings_on_open_and_keeps_its_data(tmp_path: Path) -> None:
    folder = tmp_path / "kb"
    shard = qe.EdgeShard.create(str(folder), qe.EdgeConfig(
        vectors={DENSE: qe.EdgeVectorParams(size=8, distance=qe.Distance.Cosine)},
        sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)}))
    shard.update(qe.UpdateOperation.upsert_points(
        [qe.Point(1, {DENSE: [1.0] + [0.0] * 7}, {"namespace": "a"})]))
    shard.flush()
    shard.close()
    assert "optimizers" not in json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
    with EdgeStore(tmp_path) as store:
        assert store.count("kb") == 1
        assert store.collection_dimension("kb") == 8
        assert [h.id for h in store.search("kb", [1.0] + [0.0] * 7, limit=1)]
    assert _optimizers(folder)["indexing_threshold"] == seal_threshold_kb(8)
    config = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
    assert config["vectors"][DENSE]["size"] == 8 and SPARSE in config["sparse_vectors"]


def test_optimize_builds_no_hnsw_graph(tmp_path: Path) -> None:
    # 2,800 x 1024 float32 = 11 MiB: over the engine's default indexing threshold
    # (10,000 KB), so without kbsync's setting this optimize() would build a graph.
    dim, n = 1024, 2800
    points = _points(n, dim)
    with EdgeStore(tmp_path) as store:
        store.ensure_collection("kb", dimension=dim, keyword_indexes=("namespace",), sparse=True)
        store.upsert("kb", points)
        before = [h.id for h in store.search("kb", points[5].vector, limit=3)]
        store.delete_ids("kb", [p.id for p in points[: n // 2]])  # over the vacuum threshold
        store.optimize()
        assert store.count("kb") == n - n // 2
        assert [h.id for h in store.search("kb", points[-1].vector, limit=1)] == [points[-1].id]
        assert before[0] == points[5].id
    # The engine's per-segment config (its own file; no API tells the index type).
    segments = list((tmp_path / "kb" / "segments").glob("*/segment.json"))
    assert segments
    for seg in segments:
        vector_data = json.loads(seg.read_text(encoding="utf-8"))["config"]["vector_data"]
        assert vector_data[DENSE]["index"]["type"] == "plain", seg
