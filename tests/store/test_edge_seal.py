"""Sealed segments of the embedded store (``kbsync.store.edge.seal``, issue 23).

The appendable segment seals every ``SEAL_EVERY`` points inside the upsert that fills
it: immutable, mapped, int8-quantized, no graph; dense search rescores on the original
vectors, so recall@10 against exact search stays >= 0.99. A store made before sealed
segments is sealed by ``EdgeStore.seal`` and loses no point; a kill -9 during a seal
loses nothing and the next open converges.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import qdrant_edge as qe

from kbsync.models import SparseVec
from kbsync.store import Point
from kbsync.store import layout
from kbsync.store.edge import seal as es
from kbsync.store.base import DENSE, SPARSE
from kbsync.store.edge.store import EdgeStore

ROOT = Path(__file__).resolve().parents[2]


def _vectors(n: int, dim: int, seed: int = 5) -> np.ndarray:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, dim), dtype=np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _points(vectors: np.ndarray, start: int = 0) -> list[Point]:
    return [Point(f"00000000-0000-0000-0000-{start + i + 1:012d}",
                  {"namespace": f"ns-{(start + i) % 4}", "text": f"chunk {start + i}"},
                  vectors[i].tolist(), SparseVec([(start + i) % 97], [1.0]))
            for i in range(len(vectors))]


@pytest.fixture()
def small_seal(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(layout, "SEAL_EVERY", 1000)
    return 1000


def test_segments_seal_as_the_store_grows_and_recall_stays(tmp_path: Path,
                                                           small_seal: int) -> None:
    dim, n = 64, 4500
    vectors = _vectors(n, dim)
    with EdgeStore(tmp_path) as store:
        store.ensure_collection("kb", dimension=dim, keyword_indexes=("namespace",),
                                sparse=True)
        store.upsert("kb", _points(vectors))
        shard = store._require("kb").shard  # no public API tells sealed from appendable
        info = shard.info()
        assert info.points_count == n
        assert info.indexed_vectors_count >= n - small_seal  # all but the unsealed tail
        assert es.unsealed_points(shard) < small_seal
        assert info.segments_count >= n // small_seal
        queries = _vectors(50, dim, seed=9)
        found = [{h.id for h in store.search("kb", q.tolist(), limit=10)} for q in queries]
        exact = np.argsort(-(queries @ vectors.T), axis=1)[:, :10]
        recall = np.mean([len(f & {_points(vectors[j:j + 1], int(j))[0].id for j in row}) / 10
                          for f, row in zip(found, exact)])
        assert recall >= 0.99, recall
        # Term 7 is in every 97th point, all at weight 1.0: they tie, and which three of the
        # ~46 come first depends on segment order, so the test asks only that each hit has it.
        with_term = {p.id for p in _points(vectors) if 7 in p.sparse.indices}
        hits = store.sparse_search("kb", SparseVec([7], [1.0]), limit=3)
        assert len(hits) == 3 and {h.id for h in hits} <= with_term
    assert es.is_sealed_layout(tmp_path / "kb")
    with EdgeStore(tmp_path) as store:  # reopened: the same points, the same answers
        assert store.count("kb") == n
        assert {h.id for h in store.search("kb", queries[0].tolist(), limit=10)} == found[0]


def _old_shard(folder: Path, vectors: np.ndarray) -> None:
    """A shard as kbsync made it before issue 23: one appendable segment, no quantization."""
    shard = qe.EdgeShard.create(str(folder), qe.EdgeConfig(
        vectors={DENSE: qe.EdgeVectorParams(size=vectors.shape[1], distance=qe.Distance.Cosine)},
        sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        optimizers=qe.EdgeOptimizersConfig(indexing_threshold=0, prevent_unoptimized=False)))
    for start in range(0, len(vectors), 1000):
        shard.update(qe.UpdateOperation.upsert_points(
            [qe.Point(start + i + 1, {DENSE: v.tolist()}, {"namespace": "a"})
             for i, v in enumerate(vectors[start:start + 1000])]))
    shard.flush()
    shard.close()


def test_an_older_store_is_sealed_once_and_loses_no_point(tmp_path: Path,
                                                          small_seal: int) -> None:
    vectors = _vectors(3000, 32)
    _old_shard(tmp_path / "kb", vectors)
    assert not es.is_sealed_layout(tmp_path / "kb")
    with EdgeStore(tmp_path) as store:
        report = store.seal("kb")
        assert report["points"] >= 3000 - small_seal and report["seconds"] >= 0
        assert store.count("kb") == 3000
        assert store.seal("kb") == {"points": 0, "seconds": 0.0}  # nothing due any more
        top = store.search("kb", vectors[42].tolist(), limit=1)
        assert top[0].id == "43"  # integer ids, as this shard was written
    assert es.is_sealed_layout(tmp_path / "kb")


def test_seal_of_a_missing_collection_seals_nothing(tmp_path: Path) -> None:
    with EdgeStore(tmp_path) as store:
        assert store.seal("nothing") == {"points": 0, "seconds": 0.0}


_CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    from kbsync.store import Point, layout
    from kbsync.store.edge.store import EdgeStore

    phase, path = sys.argv[1], sys.argv[2]
    dim, n = 256, 24000
    if phase == "load":  # one big appendable segment: nothing seals yet
        layout.SEAL_EVERY = 10**9
        rng = np.random.default_rng(3)
        with EdgeStore(path) as store:
            store.ensure_collection("kb", dimension=dim, keyword_indexes=("namespace",))
            for start in range(0, n, 2000):
                v = rng.standard_normal((2000, dim), dtype=np.float32)
                store.upsert("kb", [Point(f"00000000-0000-0000-0000-{start + i + 1:012d}",
                                          {"namespace": "a"}, v[i].tolist())
                                    for i in range(2000)])
    else:
        layout.SEAL_EVERY = 8000
        with EdgeStore(path) as store:
            print("sealing", flush=True)
            print(store.seal("kb"), store.count("kb"), flush=True)
""")


def _run_child(script: Path, phase: str, store: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, str(script), phase, str(store)], env=env,
                            stdout=subprocess.PIPE, text=True)


def _wait_for_builder(folder: Path, proc: subprocess.Popen, timeout: float = 60) -> bool:
    """Wait until the engine builds a sealed segment (its ``temp_segments/segment_builder_*``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if any((folder / "temp_segments").glob("segment_builder_*")):
            return True
        time.sleep(0.001)
    return False


def test_kill_during_a_seal_loses_nothing_and_the_next_open_converges(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(_CHILD, encoding="utf-8")
    store_path = tmp_path / "store"
    assert _run_child(script, "load", store_path).wait(timeout=300) == 0
    proc = _run_child(script, "seal", store_path)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "sealing"
    caught = _wait_for_builder(store_path / "kb", proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert caught, "the seal ended before the engine's segment builder was seen"
    assert proc.returncode == -signal.SIGKILL
    done = _run_child(script, "seal", store_path)  # the next run: seals, every point there
    out, _ = done.communicate(timeout=300)
    assert done.returncode == 0
    report, count = out.splitlines()[-1].rsplit(" ", 1)
    assert int(count) == 24000
    assert json.loads(report.replace("'", '"'))["points"] > 0
    with EdgeStore(store_path) as store:
        assert store.count("kb") == 24000
        assert es.unsealed_points(store._require("kb").shard) < 8000
        assert not list((store_path / "kb" / "temp_segments").glob("segment_builder_*"))


def test_a_run_on_a_store_with_a_full_unsealed_segment_seals_it_as_a_stage(
        settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first ingest on a store made before sealed segments (or after a run killed
    before its seal) seals it before its plan: ``stage_s["seal"]`` and a warning in the
    JSON, no point lost; the run after it seals nothing."""
    from kbtest import write_tree

    from kbsync.runtime import Runtime
    from kbsync.ingest.discover import parse_root
    from kbsync.ingest.runner import run_plain

    share = tmp_path / "share"
    write_tree(share, {f"d{i}.md": f"# Doc {i}\n\nBody text {i}." for i in range(3)})
    monkeypatch.setattr(layout, "SEAL_EVERY", 10**9)  # as before issue 23: nothing seals
    runtime = Runtime.open(settings)
    try:
        run_plain([parse_root(str(share))], runtime=runtime)
        dim = runtime.store.collection_dimension(settings.collection)
        runtime.store.upsert(settings.collection, [
            Point(p.id, {"namespace": "elsewhere"}, p.vector)
            for p in _points(_vectors(2500, dim), start=10)])
        total = runtime.store.count(settings.collection)
    finally:
        runtime.close()
    monkeypatch.setattr(layout, "SEAL_EVERY", 1000)
    runtime = Runtime.open(settings)
    try:
        summary = run_plain([parse_root(str(share))], runtime=runtime).to_dict()
        assert list(summary["stage_s"])[:2] == ["checks", "seal"]
        assert any("sealed" in w and "points of the embedded store" in w
                   for w in summary["warnings"])
        assert runtime.store.count(settings.collection) == total
        again = run_plain([parse_root(str(share))], runtime=runtime).to_dict()
        assert "seal" not in again["stage_s"]
    finally:
        runtime.close()


def test_the_read_ahead_finds_every_flag_file_and_int8_vector_file_and_changes_none(
        tmp_path: Path, small_seal: int) -> None:
    from kbsync.store.edge.check import warm_mapped_files

    vectors = _vectors(2500, 16)
    with EdgeStore(tmp_path) as store:
        store.ensure_collection("kb", dimension=16, keyword_indexes=("namespace",), sparse=True)
        store.upsert("kb", _points(vectors))
    flags = sorted((tmp_path / "kb" / "segments").glob("*/**/flags_a.dat"))
    assert len(flags) >= 2 * 3  # every segment has a deleted-vector set and a null index
    int8 = sorted((tmp_path / "kb" / "segments").glob("*/vector_storage-*/quantized.data"))
    assert len(int8) == 2  # one per sealed segment
    read = flags + int8
    before = {p: (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes()) for p in read}
    files, seconds = warm_mapped_files(tmp_path / "kb")
    assert files == len(read) and seconds >= 0
    assert {p: (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes()) for p in read} == before
    assert warm_mapped_files(tmp_path / "missing") == (0, pytest.approx(0, abs=1))
    with EdgeStore(tmp_path) as store:  # the load that warms first answers as before
        assert store.count("kb") == 2500
        assert store.search("kb", vectors[9].tolist(), limit=1)[0].id == _points(vectors)[9].id


def test_writes_across_reopens_of_a_hybrid_collection_seal(tmp_path: Path,
                                                           small_seal: int) -> None:
    """The engine counts every sparse vector as indexed, so ``points - indexed`` reads 0 on a
    hybrid collection; the seal counter must start from the appendable segment's own count
    at each open, or runs that each write less than ``SEAL_EVERY`` points never seal."""
    dim, per_run = 16, 400
    vectors = _vectors(3 * per_run, dim)
    for run in range(3):
        with EdgeStore(tmp_path) as store:
            store.ensure_collection("kb", dimension=dim, sparse=True)
            if run:  # reopened: the counter starts at what the appendable segment holds
                assert es.unsealed_points(store._require("kb").shard, tmp_path / "kb") == \
                    run * per_run
            store.upsert("kb", _points(vectors[run * per_run:(run + 1) * per_run],
                                       start=run * per_run))
    # 1,200 points in 400-point runs: the third run crossed 1,000 and sealed
    from kbsync.store.edge import seals

    assert seals.sealed_segments(tmp_path / "kb"), "no segment sealed across three runs"
    with EdgeStore(tmp_path) as store:
        assert store.count("kb") == 3 * per_run
        assert es.unsealed_points(store._require("kb").shard, tmp_path / "kb") < small_seal


def test_a_seal_with_nothing_due_keeps_the_count_so_the_next_writes_seal_on_time(
        tmp_path: Path, small_seal: int) -> None:
    """Every ingest first calls ``seal`` (the checks stage); on a hybrid collection whose
    appendable segment is nearly full nothing is due then, and the counter must keep what the
    segment holds. It was reset to the engine's count (0 on a hybrid collection), so the run
    that crossed ``SEAL_EVERY`` sealed nothing and the next run's start sealed it with a
    warning (measured at 100k chunks: 19,706 unsealed + 2,378 written, no seal in the run)."""
    dim = 16
    vectors = _vectors(small_seal + 100, dim)
    with EdgeStore(tmp_path) as store:
        store.ensure_collection("kb", dimension=dim, sparse=True)
        store.upsert("kb", _points(vectors[:small_seal - 50]))
    with EdgeStore(tmp_path) as store:
        store.ensure_collection("kb", dimension=dim, sparse=True)
        assert store.seal("kb") == {"points": 0, "seconds": 0.0}  # the run's first step
        assert store._require("kb").unsealed == small_seal - 50
        store.upsert("kb", _points(vectors[small_seal - 50:], start=small_seal - 50))
        from kbsync.store.edge import seals

        assert seals.sealed_segments(tmp_path / "kb"), "the write that crossed SEAL_EVERY sealed nothing"
        assert store._require("kb").unsealed < small_seal
        assert store.count("kb") == small_seal + 100
