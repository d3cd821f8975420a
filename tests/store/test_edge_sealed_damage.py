"""A sealed segment cut short on disk (issue 23): named, never mapped, rebuilt by --repair.

Sealed segments are memory-mapped: a truncated file would kill the first search that
reads past its end (SIGBUS). The store checks sealed segments' file sizes before the
engine loads them (``kbsync.store.edge.check``, and the seal manifest of
``kbsync.store.edge.seals``): ``kbsync verify`` names the segment and the file, and
``kbsync verify --repair`` sets that segment aside and rebuilds its documents from the
share, losing no document.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kbtest import write_tree
from kbsync.app import cli
from kbsync.runtime import Runtime
from kbsync.ingest.discover import parse_root
from kbsync.ingest.runner import run_plain
from kbsync.store.edge import check as edge_check
from kbsync.store import layout

N_DOCS = 30


def _ingest(runtime, share: Path) -> dict:
    return run_plain([parse_root(str(share))], runtime=runtime).to_dict()


def _sealed_files(settings, name: str) -> list[Path]:
    segments = settings.store_path / settings.collection / "segments"
    return sorted(p for p in segments.glob(f"*/vector_storage-dense/{name}")
                  if json.loads((p.parents[1] / "segment.json").read_text())["config"]
                  ["vector_data"]["dense"]["storage_type"] == "Mmap")


@pytest.fixture()
def sealed_store(settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A store whose chunk collection is one sealed segment and an empty appendable one."""
    monkeypatch.setattr(layout, "SEAL_EVERY", 8)
    share = tmp_path / "share"
    write_tree(share, {f"d{i:02d}.md": f"# Title {i}\n\nBody text number {i} about topic-{i}."
                       for i in range(N_DOCS)})
    runtime = Runtime.open(settings)
    try:
        total = _ingest(runtime, share)["chunks_kept"]
        runtime.store.seal(runtime.collection)
    finally:
        runtime.close()
    assert _sealed_files(settings, "matrix.dat")
    return share, total


def _verify(capsys, *args: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = cli.main(["verify", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("name", ["matrix.dat", "quantized.data"])
def test_a_truncated_sealed_segment_is_named_and_repair_rebuilds_it(
        settings, sealed_store, capsys, name: str) -> None:
    share, total = sealed_store
    assert edge_check.short_files(settings.store_path / settings.collection) == []
    victim = _sealed_files(settings, name)[0]
    with victim.open("r+b") as fh:
        fh.truncate(victim.stat().st_size // 2)
    code, found = _verify(capsys)  # named in the report (exit 3), not a failure
    assert code == 3
    assert f"segment {victim.parents[1].name}: vector_storage-dense/{name} has" \
        in found["unreadable"]
    assert "kbsync verify --repair" in found["unreadable"]

    code, fixed = _verify(capsys, "--repair")
    # the seal manifest names the segment cut short: only it is set aside and rebuilt
    assert code == 0 and fixed["remaining"] == 0
    assert fixed["set_aside"][0]["segments"] == [victim.parents[1].name]
    assert Path(fixed["repair"]["set_aside"]).is_dir()  # kept, never deleted
    runtime = Runtime.open(settings)
    try:
        assert runtime.store.count(runtime.collection) == total
        assert _ingest(runtime, share)["unchanged"] == N_DOCS
    finally:
        runtime.close()
    assert _verify(capsys)[0] == 0
