"""SIGKILL ``kbsync ingest`` mid-run, re-run, and compare with a clean run.

The invariant (STYLE.md, "be pessimistic about writes"): whatever instant the
process dies, re-running converges to exactly the index a clean run builds —
same point ids, same payloads, same state records, no duplicates, nothing missing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kbtest import cli_env, write_tree

KBSYNC = str(Path(sys.executable).with_name("kbsync"))
VOLATILE_STATE = ("run_id", "updated_at")


def _share(root: Path, n: int = 300) -> None:
    write_tree(root, {f"dir{i % 7}/doc{i:03d}.md":
                      f"# Document {i}\n\n" + "\n\n".join(
                          f"Paragraph {j} of document {i}: " + " ".join(
                              f"word{(i * 31 + j * 7 + w) % 997}" for w in range(60))
                          for j in range(4)) for i in range(n)})


SETTINGS = {"KBSYNC_EMBED_PROVIDER": "hash", "KBSYNC_CHUNK_TOKENS": "120",
            "KBSYNC_CHUNK_OVERLAP": "20", "KBSYNC_FILES_PER_BATCH": "16"}


def _ingest(env, share: Path, *, kill_after: float | None = None) -> tuple[int, float]:
    started = time.monotonic()
    errors = Path(env["KBSYNC_HOME"]).with_suffix(".stderr")
    with errors.open("wb") as sink:  # kept for the assertion message of the last run
        proc = subprocess.Popen([KBSYNC, "ingest", str(share), "--json"], env=env,
                                stdout=subprocess.DEVNULL, stderr=sink,
                                start_new_session=True)
    if kill_after is not None:
        try:
            proc.wait(timeout=kill_after)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    code = proc.wait(timeout=600)
    return code, time.monotonic() - started


def _snapshot(home: Path) -> tuple[dict, dict]:
    from kbsync.catalog.state import is_meta
    from kbsync.store.edge.store import EdgeStore

    store = EdgeStore(home / "qdrant")
    try:
        points = {p.id: p.payload for p in store.scroll("kbsync")}
        states = {p.payload["doc_id"]: {k: v for k, v in p.payload.items()
                                        if k not in VOLATILE_STATE}
                  for p in store.scroll("kbsync_state") if not is_meta(p.payload)}
    finally:
        store.close()
    return points, states


@pytest.mark.slow
def test_sigkill_at_several_points_converges_to_the_clean_index(prefect_api, tmp_path):
    share = tmp_path / "share"
    _share(share)
    clean_home, crash_home = tmp_path / "clean", tmp_path / "crash"
    code, clean_s = _ingest(cli_env(prefect_api, clean_home, **SETTINGS), share)
    assert code == 0
    clean = _snapshot(clean_home)
    assert len(clean[1]) == 300 and len(clean[0]) >= 300

    env = cli_env(prefect_api, crash_home, **SETTINGS)
    kills = 0
    for fraction in (0.45, 0.6, 0.75, 0.9):
        code, _ = _ingest(env, share, kill_after=clean_s * fraction)
        kills += code < 0  # killed by a signal, not finished
    code, _ = _ingest(env, share)
    assert code == 0, Path(env["KBSYNC_HOME"]).with_suffix(".stderr").read_text()
    crashed = _snapshot(crash_home)
    assert kills >= 1  # at least one run really died mid-way
    assert crashed[0].keys() == clean[0].keys()  # no duplicates, nothing missing
    assert crashed[0] == clean[0]
    assert crashed[1] == clean[1]
