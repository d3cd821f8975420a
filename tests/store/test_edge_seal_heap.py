"""A seal hands the heap it freed back to the kernel (``kbsync.store.edge.heap``, issue 23).

A seal builds a segment's payload and sparse indexes on the C heap and frees them once
they are in mapped files; glibc kept those pages, so a long ingest's anonymous memory grew
with every seal. What that saves is measured by ``tests/bench/seal_heap_bench.py`` (a
writer's anonymous memory at one point varies by tens of MiB from run to run, too much for
a test to compare two runs); these check that it happens, and safely.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kbsync.store import layout
from kbsync.store.edge import seal as es
from kbsync.models import SparseVec
from kbsync.store import Point
from kbsync.store.edge.store import EdgeStore
from kbsync.store.edge.heap import release_free_heap


def test_releasing_the_heap_frees_nothing_in_use() -> None:
    kept = [bytearray(b"x" * 4096) for _ in range(2000)]
    released = release_free_heap()
    assert all(block == b"x" * 4096 for block in kept)  # live memory untouched
    # glibc (every supported Linux) has malloc_trim; elsewhere the call is a no-op
    assert released or not Path("/lib/x86_64-linux-gnu/libc.so.6").exists()


def test_every_seal_releases_the_free_heap(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(layout, "SEAL_EVERY", 1000)
    monkeypatch.setattr(es, "release_free_heap", lambda: calls.append(1) or True)
    with EdgeStore(tmp_path) as store:
        store.ensure_collection("kb", dimension=64, sparse=True)
        for start in range(0, 2500, 500):
            store.upsert("kb", [Point(f"00000000-0000-0000-0000-{i + 1:012d}", {"n": i},
                                      [1.0] + [0.0] * 63, SparseVec([i % 5], [1.0]))
                                for i in range(start, start + 500)])
    assert len(calls) >= 2  # 2,500 points at 1,000 a segment: two seals
