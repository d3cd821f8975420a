"""Disk full during a seal (issue 23): the seal is refused before it starts, nothing is lost.

A seal writes a copy of the appendable segment through memory-mapped files; on a full
file system the engine would die of SIGBUS mid-way. ``edge.seal.seal`` books the room
first (``edge.check.seal_need``): without it the seal is postponed with a warning, the
points stay written and searchable, and once space is freed the next seal converges.
Runs in a child process on a real small tmpfs (root only; skipped, saying why, elsewhere)
so that a SIGBUS would fail the test instead of killing pytest.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_CHILD = textwrap.dedent("""
    import logging, os, sys
    from pathlib import Path
    import numpy as np
    from kbsync.store import Point
    from kbsync.store.edge import diskspace, check as edge_check
    from kbsync.store import layout
    from kbsync.store.edge import seal as es
    from kbsync.store.edge.store import EdgeStore

    logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="%(message)s")
    mount = Path(sys.argv[1])
    layout.SEAL_EVERY = 10**9
    rng = np.random.default_rng(2)
    store = EdgeStore(mount / "store")
    store.ensure_collection("kb", dimension=128, keyword_indexes=("namespace",))
    n = 12000
    for start in range(0, n, 1000):
        v = rng.standard_normal((1000, 128), dtype=np.float32)
        store.upsert("kb", [Point(f"00000000-0000-0000-0000-{start + i + 1:012d}",
                                  {"namespace": "a", "text": "x" * 800}, v[i].tolist())
                            for i in range(1000)])
    store.close()
    layout.SEAL_EVERY = 1000  # the threshold is given to the engine when the shard opens
    store = EdgeStore(mount / "store")
    store.count("kb")
    folder = mount / "store" / "kb"
    need = edge_check.seal_need(folder)
    ballast = mount / "ballast"
    with open(ballast, "wb") as fh:  # leave half of what the seal may need
        fh.write(b"\\0" * max(0, diskspace.free_bytes(mount) - need // 2))
    print("refused", store.seal("kb"), store.count("kb"), flush=True)
    print("builders", len(list((folder / "temp_segments").glob("segment_builder_*"))))
    ballast.unlink()
    print("sealed", store.seal("kb")["points"], store.count("kb"), flush=True)
    store.close()
    with EdgeStore(mount / "store") as again:
        print("reopened", again.count("kb"), es.unsealed_points(again._require("kb").shard))
""")


@pytest.fixture
def tmpfs(tmp_path: Path):
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("needs root on Linux to mount a small tmpfs (the disk this test fills)")
    point = tmp_path / "tmpfs"
    point.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400m", "tmpfs", str(point)],
                          capture_output=True, text=True)
    if proc.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip() or proc.returncode}")
    yield point
    subprocess.run(["umount", "-l", str(point)], capture_output=True)


def test_a_seal_without_room_is_postponed_and_loses_nothing(tmpfs: Path, tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(_CHILD, encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script), str(tmpfs)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    lines = proc.stdout.splitlines()
    warning = next(line for line in lines if "seal postponed" in line)
    assert "not enough disk space under" in warning and "sealing a segment of 'kb'" in warning
    assert "refused {'points': 0, 'seconds': 0.0} 12000" in lines
    assert "builders 0" in lines
    assert "sealed 12000 12000" in lines
    assert "reopened 12000 0" in lines
