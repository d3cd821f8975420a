"""Sealed segments map their indexes and int8 vectors (``edge.seal.INDEX_MEMORY``,
``edge.seal.QUANTIZED_MEMORY``; issue 23).

A new collection's sealed segments keep their payload indexes, sparse inverted index, id
tracker and int8 vectors in mapped files, so opening the store maps them instead of rebuilding
or reading them into RAM. A store whose sealed segments were built with those indexes on the
heap, or with their int8 vectors in RAM (kbsync before each), opens with its placement kept: no
point lost, and no sealed segment rebuilt behind its back.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import qdrant_edge as qe

from kbsync.models import SparseVec
from kbsync.store import Filter, Point
from kbsync.store.edge import check as edge_check
from kbsync.store import layout
from kbsync.store.edge import seal as es
from kbsync.store.base import DENSE, SPARSE
from kbsync.store.edge.store import EdgeStore

DIM = 32


def _vectors(n: int, seed: int = 5) -> np.ndarray:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, DIM), dtype=np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _points(vectors: np.ndarray, start: int = 0) -> list[Point]:
    return [Point(f"00000000-0000-0000-0000-{start + i + 1:012d}",
                  {"namespace": f"ns-{(start + i) % 4}", "doc_id": f"d{(start + i) // 5}",
                   "embedding_failed": False, "modified": start + i},
                  vectors[i].tolist(), SparseVec([(start + i) % 97], [1.0]))
            for i in range(len(vectors))]


def _sealed(folder: Path) -> list[Path]:
    return [s for s in sorted((folder / "segments").glob("*/"))
            if (s / "segment.json").is_file() and not edge_check.is_appendable(s)]


def _quantized_memory(segment: Path) -> str:
    config = json.loads((segment / "segment.json").read_text())["config"]
    return config["vector_data"][DENSE]["quantization_config"]["scalar"]["memory"]


def _placement(segment: Path) -> tuple[str, str | None, set[str]]:
    """(sparse index type, id tracker memory, payload index memories) of a sealed segment."""
    config = json.loads((segment / "segment.json").read_text())["config"]
    fields = json.loads((segment / "payload_index" / "config.json").read_text())["indexed_fields"]
    return (config["sparse_vector_data"][SPARSE]["index"]["index_type"],
            config.get("id_tracker_memory"), {str(f.get("memory")) for f in fields.values()})


@pytest.fixture()
def small_seal(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(layout, "SEAL_EVERY", 1000)
    return 1000


def test_a_new_collection_seals_segments_with_mapped_indexes(tmp_path: Path,
                                                            small_seal: int) -> None:
    vectors = _vectors(2500)
    with EdgeStore(tmp_path) as store:
        store.ensure_collection("kb", dimension=DIM, keyword_indexes=("namespace", "doc_id"),
                                sparse=True, bool_indexes=("embedding_failed",),
                                integer_indexes=("modified",))
        store.upsert("kb", _points(vectors))
        before = {h.id for h in store.search("kb", vectors[3].tolist(), limit=5,
                                             flt=Filter.where(namespace="ns-3"))}
    sealed = _sealed(tmp_path / "kb")
    assert len(sealed) >= 2
    for segment in sealed:
        assert _placement(segment) == ("Mmap", "cold", {"cold"})
        assert _quantized_memory(segment) == "cold"
    with EdgeStore(tmp_path) as store:  # reopened: mapped, the same points and answers
        assert store.count("kb") == 2500
        assert store.count("kb", Filter.where(namespace="ns-1", doc_id="d1")) == 2  # 5, 9
        assert {h.id for h in store.search("kb", vectors[3].tolist(), limit=5,
                                           flt=Filter.where(namespace="ns-3"))} == before
        hits = store.sparse_search("kb", SparseVec([7], [1.0]), limit=30)
        assert hits and all(int(h.id[-12:]) % 97 == 8 for h in hits)


def _heap_indexed_shard(folder: Path, vectors: np.ndarray) -> None:
    """A shard sealed as kbsync sealed it before its indexes were mapped."""
    old = qe.EdgeConfig(
        vectors={DENSE: qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine,
                                            memory=qe.Memory.Cold)},
        sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        hnsw_config=es.hnsw_config(),
        quantization_config=es.quantization_config(qe.Memory.Pinned),
        payload_memory=qe.Memory.Cold, optimizers=es.optimizers_config(DIM))
    _sealed_shard(folder, old, qe.KeywordIndexParams(is_tenant=True), vectors)


def _sealed_shard(folder: Path, config: qe.EdgeConfig, namespace_index: qe.KeywordIndexParams,
                  vectors: np.ndarray) -> None:
    """A shard made with ``config`` outside kbsync, its ``vectors`` written and sealed."""
    shard = qe.EdgeShard.create(str(folder), config)
    shard.update(qe.UpdateOperation.create_field_index("namespace", namespace_index))
    shard.update(qe.UpdateOperation.upsert_points(
        [qe.Point(p.id, {DENSE: p.vector, SPARSE: qe.SparseVector(p.sparse.indices,
                                                                   p.sparse.values)},
                  p.payload) for p in _points(vectors)]))
    shard.flush()
    shard.optimize()
    shard.close()


def test_a_store_sealed_with_heap_indexes_keeps_them_and_loses_no_point(
        tmp_path: Path, small_seal: int) -> None:
    vectors = _vectors(3000)
    _heap_indexed_shard(tmp_path / "kb", vectors[:1500])
    old_sealed = {s.name for s in _sealed(tmp_path / "kb")}
    assert old_sealed and all(_placement(tmp_path / "kb" / "segments" / name)[0]
                              == "ImmutableRam" for name in old_sealed)
    with EdgeStore(tmp_path) as store:
        assert store.count("kb") == 1500
        store.ensure_collection("kb", dimension=DIM, keyword_indexes=("namespace",),
                                sparse=True)
        store.upsert("kb", _points(vectors[1500:], start=1500))  # seals again
        assert store.count("kb") == 3000
        top = store.search("kb", vectors[42].tolist(), limit=1)
        assert top[0].id == _points(vectors[42:43], 42)[0].id
    sealed = {s.name for s in _sealed(tmp_path / "kb")}
    assert old_sealed < sealed  # the old sealed segments were not rebuilt
    for name in sealed:  # and every seal kept the store's placement
        assert _placement(tmp_path / "kb" / "segments" / name)[:2] == ("ImmutableRam", None)
    with EdgeStore(tmp_path) as store:
        assert store.count("kb") == 3000


def test_a_small_store_of_the_older_layout_without_sealed_segments_gets_mapped_indexes(
        tmp_path: Path, small_seal: int) -> None:
    vectors = _vectors(1500)
    _heap_indexed_shard(tmp_path / "kb", vectors[:500])  # 500 < SEAL_EVERY: nothing sealed
    assert not _sealed(tmp_path / "kb")
    with EdgeStore(tmp_path) as store:
        store.ensure_collection("kb", dimension=DIM, keyword_indexes=("namespace",),
                                sparse=True)
        store.upsert("kb", _points(vectors[500:], start=500))
        assert store.count("kb") == 1500
    sealed = _sealed(tmp_path / "kb")
    assert sealed and all(_placement(s)[:2] == ("Mmap", "cold") for s in sealed)


def _pinned_int8_shard(folder: Path, vectors: np.ndarray) -> None:
    """A shard sealed as kbsync sealed it before its int8 vectors were mapped."""
    old = es.collection_config(DIM, sparse=True, quantized=qe.Memory.Pinned)
    _sealed_shard(folder, old, qe.KeywordIndexParams(is_tenant=True, memory=es.INDEX_MEMORY),
                  vectors)


def test_a_store_sealed_with_int8_vectors_in_ram_keeps_them_and_loses_no_point(
        tmp_path: Path, small_seal: int) -> None:
    """Given the mapped placement, the engine's next seal would rebuild every old sealed
    segment in one call; the store keeps RAM instead, and every later seal follows it."""
    vectors = _vectors(3000)
    _pinned_int8_shard(tmp_path / "kb", vectors[:1500])
    old_sealed = {s.name for s in _sealed(tmp_path / "kb")}
    assert old_sealed and all(_quantized_memory(tmp_path / "kb" / "segments" / name)
                              == "pinned" for name in old_sealed)
    with EdgeStore(tmp_path) as store:
        assert store.count("kb") == 1500
        store.ensure_collection("kb", dimension=DIM, keyword_indexes=("namespace",),
                                sparse=True)
        store.upsert("kb", _points(vectors[1500:], start=1500))  # seals again
        assert store.count("kb") == 3000
        top = store.search("kb", vectors[42].tolist(), limit=1)
        assert top[0].id == _points(vectors[42:43], 42)[0].id
    sealed = {s.name for s in _sealed(tmp_path / "kb")}
    assert old_sealed < sealed  # the old sealed segments were not rebuilt
    assert {_quantized_memory(tmp_path / "kb" / "segments" / name) for name in sealed} == {
        "pinned"}
    with EdgeStore(tmp_path) as store:
        assert store.count("kb") == 3000


def test_a_sealed_segment_with_its_deleted_flags_cut_short_is_named_before_the_engine_panics(
        tmp_path: Path, small_seal: int) -> None:
    """Cut short, ``id_tracker.deleted`` made the engine panic on open (a ``PanicException``,
    which no ``except Exception`` catches); it is a one-line ``StoreDrift`` instead."""
    from kbsync.errors import StoreDrift

    with EdgeStore(tmp_path) as store:
        store.ensure_collection("kb", dimension=DIM, keyword_indexes=("namespace",), sparse=True)
        store.upsert("kb", _points(_vectors(1500)))
    flags = _sealed(tmp_path / "kb")[0] / "id_tracker.deleted"
    with flags.open("r+b") as fh:
        fh.truncate(flags.stat().st_size // 2)
    with EdgeStore(tmp_path) as store:
        with pytest.raises(StoreDrift, match="id_tracker.deleted has"):
            store.count("kb")
