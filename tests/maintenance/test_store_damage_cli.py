"""Four damages of a store of several sealed segments, through the real CLI (issue 37).

Each test copies one clean store (made once, at a seal threshold small enough for several
sealed segments in the chunk collection; the state collection's records stay in its
appendable segment, as in the issue), damages the copy as the issue's
hostile user did, and runs ``kbsync`` in a subprocess:

- a sealed segment's payload page overwritten (the engine fails its LZ4 decoding);
- a sealed segment's vectors overwritten (the engine scored ``nan`` and ~1e37);
- the state collection's payload pages overwritten;
- a sealed segment folder removed (the engine served fewer chunks, exit 0).

Each read fails with one line and, with ``--json``, one JSON object; ``verify`` names the
damage; ``verify --repair`` sets it aside (kept) and ends with the documents, points and
search hits of the clean store.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from kbtest import KBSYNC, hash_env, topic_share
from kbsync.ingest.discover import parse_root
from kbsync.ingest.runner import run_plain
from kbsync.runtime import Runtime
from kbsync.settings import Settings
from kbsync.store import layout
from kbsync.store.edge import seals

pytestmark = pytest.mark.slow

N_DOCS = 90
SEAL_EVERY = 40
QUERIES = ["volcano guide number 0", "harbour guide number 14", "fjord guide number 10"]
OUTER = ("KBSYNC_", "PREFECT_API_URL")


def _kbsync(home: Path, *args: str) -> tuple[int, dict | str | None, str]:
    """The real CLI: exit code, its JSON object (``--json``: stdout must be exactly one;
    else stdout's text), and stderr."""
    proc = subprocess.run([KBSYNC, *args],
                          env=hash_env(None, home, drop=OUTER), capture_output=True, text=True,
                          timeout=300)
    data: dict | str | None = proc.stdout
    if "--json" in args:
        data = json.loads(proc.stdout)  # one object, valid JSON (no NaN): or this raises
        json.dumps(data, allow_nan=False)
    # (a panic's own lines, written by the engine's Rust hook, may precede kbsync's one line)
    assert "Traceback (most recent call last)" not in proc.stderr, proc.stderr
    return proc.returncode, data, proc.stderr


def _one_line_failure(home: Path, *args: str) -> dict:
    code, data, err = _kbsync(home, *args, "--json")
    assert code == 1, (code, data, err)
    lines = [line for line in err.splitlines() if line.startswith("kbsync:")]
    assert len(lines) == 1 and "kbsync verify --repair" in lines[0], err
    assert data is not None and data["error"]["kind"] == "StoreDamaged", data
    return data


def _hits(home: Path, mode: str) -> list[list[str]]:
    out = []
    for query in QUERIES:
        code, data, err = _kbsync(home, "search", query, "--mode", mode, "--json")
        assert code == 0, err
        assert data is not None and all(math.isfinite(h["score"]) for h in data["results"])
        out.append([h["doc_id"] for h in data["results"]])
    return out


def _snapshot(home: Path) -> dict:
    code, stats, err = _kbsync(home, "stats", "--json")
    assert code == 0, err
    return {"stats": stats, "dense": _hits(home, "dense"), "hybrid": _hits(home, "hybrid")}


def _collection_folder(home: Path, name: str = "kbsync") -> Path:
    return home / "qdrant" / name


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    """``(home, share, snapshot)`` of a clean store: several sealed segments in the chunk
    collection, made at :data:`SEAL_EVERY` points."""
    base = tmp_path_factory.mktemp("clean")
    share = topic_share(base / "share", N_DOCS, filler=3)
    home = base / "home"
    with pytest.MonkeyPatch.context() as patch:
        for key in [k for k in __import__("os").environ if k.startswith(OUTER)]:
            patch.delenv(key)
        patch.setenv("KBSYNC_HOME", str(home))
        patch.setenv("KBSYNC_EMBED_PROVIDER", "hash")
        patch.setenv("KBSYNC_CONVERT_ISOLATION", "false")
        patch.setenv("KBSYNC_FILES_PER_BATCH", "8")
        patch.setattr(layout, "SEAL_EVERY", SEAL_EVERY)
        runtime = Runtime.open(Settings())
        try:
            run_plain([parse_root(str(share))], runtime=runtime)
        finally:
            runtime.close()
    assert _collection_folder(home).is_dir(), "no collection"
    assert len(seals.read(_collection_folder(home))) >= 2
    return home, share, _snapshot(home)


@pytest.fixture()
def damaged_home(clean, tmp_path: Path) -> tuple[Path, dict]:
    """A copy of the clean store (its share is where the records say), and the snapshot."""
    home, _share, snapshot = clean
    copy = tmp_path / "home"
    shutil.copytree(home, copy)
    return copy, snapshot


def _segments(home: Path, name: str = "kbsync") -> list[Path]:
    return sorted(seals.sealed_segments(_collection_folder(home, name)).values())


def _randomize(path: Path, length: int | None = None, seed: int = 1) -> None:
    size = path.stat().st_size
    with path.open("r+b") as handle:
        handle.write(random.Random(seed).randbytes(min(size, length or size)))


def _repaired_as_clean(home: Path, snapshot: dict, *, damaged_segment: str | None) -> dict:
    """``verify`` names the damage, ``verify --repair`` fixes it; the store then answers
    as the clean one did. Returns the repair's JSON."""
    code, found, err = _kbsync(home, "verify", "--json")
    assert code == 3, (code, found, err)
    if damaged_segment is not None:
        assert damaged_segment in {d["segment"] for d in found["damaged"]}, found
    code, text, err = _kbsync(home, "verify")
    assert code == 3 and "verify --repair" in str(text), (text, err)
    code, fixed, err = _kbsync(home, "verify", "--repair", "--json")
    assert code == 0, (fixed, err)
    assert fixed["remaining"] == 0 and fixed["set_aside"], fixed
    for aside in fixed["set_aside"]:
        assert Path(aside["path"]).is_dir()  # kept, never deleted
    after = _snapshot(home)
    for key in ("stats", "dense", "hybrid"):
        for got, want in zip(after[key], snapshot[key]) if key != "stats" else [(after[key],
                                                                                 snapshot[key])]:
            assert got == want, key
    assert _kbsync(home, "verify", "--json")[0] == 0
    return fixed


def test_a_rotten_payload_page_fails_searches_with_one_line_and_repair_rebuilds_it(
        damaged_home) -> None:
    home, snapshot = damaged_home
    victim = _segments(home)[0]
    _randomize(victim / "payload_storage" / "page_0.dat", 1 << 20)
    failure = _one_line_failure(home, "search", QUERIES[0], "--mode", "hybrid")
    assert "LZ4" in failure["error"]["message"]
    fixed = _repaired_as_clean(home, snapshot, damaged_segment=victim.name)
    assert fixed["set_aside"][0]["segments"] == [victim.name]


def test_rotten_vectors_never_score_nan_and_repair_rebuilds_them(damaged_home) -> None:
    home, snapshot = damaged_home
    victim = _segments(home)[1]
    for name in ("matrix.dat", "quantized.data"):
        _randomize(victim / "vector_storage-dense" / name, seed=2)
    for mode in ("dense", "hybrid"):
        failures = 0
        for query in QUERIES:  # every query either fails in one line or scores finitely
            code, data, err = _kbsync(home, "search", query, "--mode", mode, "--json")
            if code:
                assert data["error"]["kind"] == "StoreDamaged", data
                assert "kbsync verify --repair" in err and len(err.strip().splitlines()) == 1
                failures += 1
        assert failures, mode  # the rotten segment scores every query it is asked
    fixed = _repaired_as_clean(home, snapshot, damaged_segment=victim.name)
    assert fixed["set_aside"][0]["segments"] == [victim.name]


def test_a_removed_sealed_segment_is_noticed_on_open_and_repair_rebuilds_it(
        damaged_home) -> None:
    home, snapshot = damaged_home
    victim = _segments(home)[0]
    shutil.rmtree(victim)
    for args in (("stats",), ("search", QUERIES[0])):
        failure = _one_line_failure(home, *args)
        assert f"sealed segment {victim.name}: is missing" in failure["error"]["message"]
    _repaired_as_clean(home, snapshot, damaged_segment=victim.name)


def test_a_rotten_state_collection_fails_with_one_line_and_repair_rebuilds_it(
        damaged_home) -> None:
    home, snapshot = damaged_home
    for segment in _collection_folder(home, "kbsync_state").glob("segments/*/"):
        for page in segment.glob("payload_storage/page_*.dat"):
            _randomize(page, 2 << 20, seed=3)
    _one_line_failure(home, "search", QUERIES[0])
    fixed = _repaired_as_clean(home, snapshot, damaged_segment=None)
    assert [r["root"] for r in fixed["state_rebuilt"]["roots"]] == ["share"], fixed
    assert fixed["state_rebuilt"]["not_rebuilt"] == []
