"""Reads of a damaged store fail with one StoreDamaged line, never a wrong answer (issue 37).

Bit rot in a sealed segment's vectors made qdrant-edge-py score hits ``nan`` and ~1e37, which
came out as ``"score": NaN`` (not JSON) and broke hybrid fusion; rot in a payload page fails
the engine's LZ4 decoding; a Rust panic (a ``BaseException``) escaped every ``except
Exception``. The CLI tests of the same damages are in
``tests/maintenance/test_store_damage_cli.py``.
"""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pytest

from kbsync.errors import StoreDamaged
from kbsync.store import layout
from kbsync.store.base import Point
from kbsync.store.edge import query as eq
from kbsync.store.edge.check import is_appendable
from kbsync.store.edge.store import EdgeStore
from kbsync.store.validate import error_context

DIM = 16


def _point(i: int, rnd: random.Random) -> Point:
    return Point(id=str(uuid.uuid5(uuid.NAMESPACE_URL, str(i))),
                 vector=[rnd.random() + 0.01 for _ in range(DIM)],
                 payload={"doc_id": f"d{i % 20}", "text": f"text {i} " * 50})


@pytest.fixture()
def sealed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A store of two sealed segments (and the appendable one); returns its folder."""
    monkeypatch.setattr(layout, "SEAL_EVERY", 100)
    rnd = random.Random(7)
    with EdgeStore(tmp_path / "s") as store:
        store.ensure_collection("c", dimension=DIM, keyword_indexes=["doc_id"])
        store.upsert("c", [_point(i, rnd) for i in range(150)])
        store.upsert("c", [_point(i, rnd) for i in range(150, 300)])
    return tmp_path / "s"


def _sealed_segments(folder: Path) -> list[Path]:
    return sorted(s for s in (folder / "c" / "segments").glob("*/") if not is_appendable(s))


def _randomize(path: Path, start: int = 0) -> None:
    size = path.stat().st_size
    with path.open("r+b") as handle:
        handle.seek(start)
        handle.write(random.Random(1).randbytes(size - start))


def test_rotten_vectors_fail_the_search_instead_of_scoring_nan(sealed: Path) -> None:
    assert len(_sealed_segments(sealed)) >= 2
    segment = _sealed_segments(sealed)[0]
    for name in ("matrix.dat", "quantized.data"):
        _randomize(segment / "vector_storage-dense" / name, start=4 if name == "matrix.dat" else 0)
    with EdgeStore(sealed) as store:
        with pytest.raises(StoreDamaged, match=r"kbsync verify --repair") as caught:
            for probe in range(5):  # a few queries: every one meets the rotten segment
                store.search("c", [1.0 if i == probe else 0.1 for i in range(DIM)], limit=20)
    assert "\n" not in str(caught.value) and "'c'" in str(caught.value)


def test_a_rotten_payload_page_is_store_damaged(sealed: Path) -> None:
    _randomize(_sealed_segments(sealed)[0] / "payload_storage" / "page_0.dat")
    with EdgeStore(sealed) as store:
        with pytest.raises(StoreDamaged, match=r"LZ4 .*kbsync verify --repair"):
            list(store.scroll("c"))


def test_scores_that_no_search_gives_are_refused() -> None:
    class Hit:
        def __init__(self, score: float) -> None:
            self.id, self.score, self.payload = "p", score, {}

    assert eq.to_scored([Hit(0.5), Hit(-1.0)], "c", cosine=True)[0].score == 0.5
    assert eq.to_scored([Hit(7.5)], "c")[0].score == 7.5  # BM25 scores are unbounded
    for bad, cosine in ((float("nan"), False), (float("inf"), False), (4.8e37, True)):
        with pytest.raises(StoreDamaged, match="scored a point"):
            eq.to_scored([Hit(bad)], "c", cosine=cosine)


class PanicException(BaseException):
    """Stands for ``pyo3_runtime.PanicException`` (known by its name: it is not importable)."""


def test_an_engine_panic_becomes_one_store_damaged_line() -> None:
    errors = error_context(eq.translate)
    with pytest.raises(StoreDamaged, match=r"^edge store: scroll on collection 'st' failed: "
                                           r"the engine panicked \(index out of bounds at "
                                           r"src.*--repair"):
        with errors("scroll", "st"):
            raise PanicException("index out of bounds\nat src/lib.rs:1")
    with pytest.raises(KeyboardInterrupt):  # every other BaseException passes untouched
        with errors("scroll", "st"):
            raise KeyboardInterrupt


def test_engine_messages_of_damaged_files_name_the_repair() -> None:
    exc = eq.translate(Exception("Service runtime error: Failed to decode value: Failed to "
                                 "decompress LZ4 value"), "search", "c")
    assert isinstance(exc, StoreDamaged) and "kbsync verify --repair" in str(exc)
    assert type(eq.translate(Exception("bad request"), "search", "c")).__name__ == "StoreError"



def test_a_panic_no_adapter_wrapped_ends_the_cli_with_one_line_and_the_json_object(
        settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    import json

    from kbsync.app import cli, cli_verify

    def panics(args, settings) -> int:
        raise PanicException("called `Option::unwrap()` on a `None` value")

    monkeypatch.setitem(cli_verify.COMMANDS, "verify", panics)
    assert cli.main(["verify", "--json"]) == 1
    captured = capsys.readouterr()
    [line] = captured.err.strip().splitlines()
    assert line.startswith("kbsync: StoreDamaged: the store engine panicked (called")
    assert "kbsync verify --repair" in line
    assert json.loads(captured.out)["error"]["kind"] == "StoreDamaged"
