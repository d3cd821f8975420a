"""Reads of an edge shard run beside its writes (``kbsync.store.edge.shard_gate``, issue 23).

The engine (qdrant-edge-py 0.9.0) is driven from several threads at once here, as the
relay and Prefect's task threads drive it: searches, counts, payload fetches and scrolls
while another thread upserts, deletes and seals. None may fail or answer wrongly, and a
read must not queue behind a write; a close waits for the reads in flight.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from kbsync.errors import StoreError
from kbsync.models import SparseVec
from kbsync.store import Filter, Point
from kbsync.store import layout
from kbsync.store.edge.store import EdgeStore
from kbsync.store.edge.shard_gate import ShardGate

DIM = 32
NAMESPACES = 4
TOTAL = 6000  # points the stress test writes


def _point(i: int, vector: np.ndarray) -> Point:
    return Point(f"00000000-0000-0000-0000-{i + 1:012d}",
                 {"namespace": f"ns-{i % NAMESPACES}", "text": f"chunk {i}", "n": i},
                 vector.tolist(), SparseVec([i % 50, 60 + i % 7], [1.0, 0.5]))


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    vectors = rng.standard_normal((n, DIM), dtype=np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _reader(store: EdgeStore, stop: threading.Event, errors: list, done: list) -> None:
    rng = np.random.default_rng(threading.get_ident() % 1000)
    calls = 0
    try:
        while not stop.is_set():
            ns = f"ns-{calls % NAMESPACES}"
            flt = Filter.where(namespace=ns)
            hits = store.search("kb", _unit(rng, 1)[0].tolist(), limit=10, flt=flt)
            assert all(h.payload["namespace"] == ns and h.payload["text"] for h in hits)
            assert len({h.id for h in hits}) == len(hits)  # no point seen in two segments
            sparse = store.sparse_search("kb", SparseVec([calls % 50], [1.0]), limit=5, flt=flt)
            assert all(h.payload["namespace"] == ns for h in sparse)
            ids = [h.id for h in hits[:3]]
            for pid, payload in store.payloads("kb", ids).items():
                assert payload["text"] == f"chunk {payload['n']}", (pid, payload)
            assert 0 <= store.count("kb", flt) <= TOTAL // NAMESPACES
            page = next(iter(store.scroll("kb", flt, page_size=8)), None)
            assert page is None or page.payload["namespace"] == ns
            calls += 1
    except Exception as exc:  # noqa: BLE001 - reported by the test thread
        errors.append(exc)
    done.append(calls)


def test_reads_beside_upserts_deletes_and_seals_never_fail(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layout, "SEAL_EVERY", 1000)
    rng = np.random.default_rng(3)
    total, batch = TOTAL, 500
    vectors = _unit(rng, total)
    with EdgeStore(tmp_path) as store:
        store.ensure_collection("kb", dimension=DIM, keyword_indexes=("namespace",),
                                sparse=True)
        store.upsert("kb", [_point(i, vectors[i]) for i in range(batch)])
        stop, errors, done = threading.Event(), [], []
        readers = [threading.Thread(target=_reader, args=(store, stop, errors, done))
                   for _ in range(2)]
        for reader in readers:
            reader.start()
        try:
            for start in range(batch, total, batch):
                store.upsert("kb", [_point(i, vectors[i]) for i in range(start, start + batch)])
                store.delete_ids("kb", [_point(start - 1, vectors[0]).id])  # one per batch
            store.delete("kb", Filter.where(text="chunk 0"))
        finally:
            stop.set()
            for reader in readers:
                reader.join()
        assert not errors, errors
        assert sum(done) > 0
        deleted = {i for i in range(batch - 1, total - 1, batch)} | {0}
        assert store.count("kb") == total - len(deleted)
        assert store._require("kb").shard.info().indexed_vectors_count >= 4000  # it sealed
        # Every surviving point is found by its own vector: the concurrent reads broke nothing.
        for i in range(1, total, 397):
            if i not in deleted:
                assert store.search("kb", vectors[i].tolist(), limit=1)[0].id == _point(
                    i, vectors[i]).id


def test_a_read_does_not_queue_behind_a_write(tmp_path: Path) -> None:
    vectors = _unit(np.random.default_rng(4), 50)
    with EdgeStore(tmp_path) as store:
        store.ensure_collection("kb", dimension=DIM, keyword_indexes=("namespace",),
                                sparse=True)
        store.upsert("kb", [_point(i, vectors[i]) for i in range(50)])
        answered: list = []
        reader = threading.Thread(
            target=lambda: answered.append(store.search("kb", vectors[7].tolist(), limit=1)))
        with store._require("kb").lock:  # a write batch (or a seal's bookkeeping) in flight
            reader.start()
            reader.join(timeout=60)
            assert not reader.is_alive(), "the search waited for the write lock"
        assert answered[0][0].id == _point(7, vectors[7]).id


def test_close_waits_for_reads_in_flight_and_refuses_later_ones() -> None:
    gate = ShardGate()
    inside, release, closed = threading.Event(), threading.Event(), threading.Event()

    def read() -> None:
        with gate.reading("kb"):
            inside.set()
            release.wait()

    def close() -> None:
        gate.closing()
        closed.set()

    reader = threading.Thread(target=read)
    reader.start()
    assert inside.wait(timeout=60)
    closer = threading.Thread(target=close)
    closer.start()
    assert not closed.wait(timeout=0.3)  # cannot happen while the read is inside
    release.set()
    assert closed.wait(timeout=60)
    reader.join()
    closer.join()
    with pytest.raises(StoreError, match="was closed"):
        with gate.reading("kb"):
            pass


def test_a_handle_kept_past_close_refuses_reads(tmp_path: Path) -> None:
    store = EdgeStore(tmp_path)
    store.ensure_collection("kb", dimension=DIM, keyword_indexes=("namespace",))
    handle = store._require("kb")
    store.close()
    with pytest.raises(StoreError, match="was closed"):
        with handle.gate.reading("kb"):
            pass
