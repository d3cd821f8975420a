"""The seal manifest (``kbsync.store.edge.seals``, issue 37): written at each seal, sizes
checked on every open, content on ``verify``; the data files it hashes stay unchanged by
the writes kbsync makes later (deletes, overwrites, an optimize that vacuums)."""

from __future__ import annotations

import json
import random
import shutil
import uuid
from pathlib import Path

import pytest

from kbsync.errors import StoreDamaged
from kbsync.store import layout
from kbsync.store.base import Filter, Point
from kbsync.store.edge import seals
from kbsync.store.edge.store import EdgeStore

DIM = 16


def _id(i: int) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, str(i)))


def _points(numbers: range, rnd: random.Random, tag: str = "a") -> list[Point]:
    return [Point(id=_id(i), vector=[rnd.random() + 0.01 for _ in range(DIM)],
                  payload={"doc_id": f"d{i % 20}", "tag": tag, "text": f"text {i} " * 30})
            for i in numbers]


@pytest.fixture()
def store_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A store whose collection ``c`` has two sealed segments of 150 points each."""
    monkeypatch.setattr(layout, "SEAL_EVERY", 100)
    rnd = random.Random(3)
    with EdgeStore(tmp_path / "s") as store:
        store.ensure_collection("c", dimension=DIM, keyword_indexes=["doc_id"])
        store.upsert("c", _points(range(150), rnd))
        store.upsert("c", _points(range(150, 300), rnd))
    return tmp_path / "s"


def _folder(store_path: Path) -> Path:
    return store_path / "c"


def test_each_seal_lists_its_segment_with_sizes_and_digests(store_path: Path) -> None:
    folder = _folder(store_path)
    listed = seals.read(folder)
    assert set(listed) == set(seals.sealed_segments(folder)) and len(listed) == 2
    for entry in listed.values():
        assert entry["points"] == 150
        files = entry["files"]
        assert {"vector_storage-dense/matrix.dat", "vector_storage-dense/quantized.data",
                "payload_storage/page_0.dat"} <= set(files)
        assert all(size > 0 and len(digest) == 32 for size, digest in files.values())
    assert json.loads((folder / seals.MANIFEST).read_text())["version"] == 1
    assert seals.damage("c", folder) == []


def test_later_writes_leave_the_hashed_files_as_sealed(store_path: Path) -> None:
    rnd = random.Random(5)
    with EdgeStore(store_path) as store:
        store.delete_ids("c", [_id(i) for i in range(0, 40)])
        store.upsert("c", _points(range(40, 80), rnd, tag="b"))  # overwrites sealed points
        store.delete("c", Filter.where(doc_id="d7"))
    assert seals.damage("c", _folder(store_path)) == []
    with EdgeStore(store_path) as store:  # and the open check passes
        assert store.count("c") == 300 - 40 - 13


def test_an_optimize_that_replaces_segments_updates_the_manifest(store_path: Path) -> None:
    with EdgeStore(store_path) as store:
        store.delete_ids("c", [_id(i) for i in range(0, 140)])  # most of the first segment
        store.optimize("c")
    folder = _folder(store_path)
    assert set(seals.read(folder)) == set(seals.sealed_segments(folder))
    with EdgeStore(store_path) as store:
        assert store.count("c") == 160
    assert seals.damage("c", folder) == []


def _randomize(path: Path) -> None:
    with path.open("r+b") as handle:
        handle.write(random.Random(1).randbytes(min(path.stat().st_size, 1 << 16)))


def test_rot_that_keeps_sizes_is_named_by_the_content_check(store_path: Path) -> None:
    folder = _folder(store_path)
    victim = sorted(seals.sealed_segments(folder).values())[1]
    _randomize(victim / "vector_storage-dense" / "matrix.dat")
    _randomize(victim / "payload_storage" / "page_0.dat")
    found = seals.damage("c", folder)
    assert [(d.segment, d.file) for d in found] == [
        (victim.name, "payload_storage/page_0.dat"),
        (victim.name, "vector_storage-dense/matrix.dat")]
    assert str(found[0]).startswith(f"sealed segment {victim.name}: payload_storage/page_0.dat "
                                    "changed since the seal")
    seals.require_sound(folder, "c")  # sizes only: an open does not read the files


def test_a_removed_sealed_segment_fails_the_open_with_one_line(store_path: Path) -> None:
    folder = _folder(store_path)
    victim = sorted(seals.sealed_segments(folder).values())[0]
    shutil.rmtree(victim)
    with EdgeStore(store_path) as store:
        with pytest.raises(StoreDamaged) as caught:
            store.count("c")
    message = str(caught.value)
    assert "\n" not in message and f"sealed segment {victim.name}: is missing (150 points)" \
        in message and "kbsync verify --repair" in message
    seals.forget(folder, [victim.name])  # what --repair does once it set the damage aside
    with EdgeStore(store_path) as store:  # opens; the engine may replay the newest segment's
        assert store.count("c") in (150, 300)  # points from its write-ahead log


def test_a_data_file_of_another_size_fails_the_open(store_path: Path) -> None:
    folder = _folder(store_path)
    page = sorted(seals.sealed_segments(folder).values())[0] / "payload_storage" / "page_0.dat"
    with page.open("ab") as handle:
        handle.write(b"\0" * 10)
    with pytest.raises(StoreDamaged, match=r"payload_storage/page_0.dat has \d+ bytes, sealed "
                                           r"with \d+"):
        seals.require_sound(folder, "c")


def test_an_unreadable_manifest_checks_nothing_and_the_next_seal_lists_again(
        store_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = _folder(store_path)
    (folder / seals.MANIFEST).write_text("{not json")
    assert seals.read(folder) == {} and seals.damage("c", folder) == []
    assert "cannot be read" in caplog.text
    assert len(seals.record(folder)) == 2 and len(seals.read(folder)) == 2


def test_segments_the_engine_empties_and_drops_leave_the_list_at_close(store_path: Path) -> None:
    rnd = random.Random(9)
    with EdgeStore(store_path) as store:  # every sealed point rewritten: the engine drops them
        store.upsert("c", _points(range(300), rnd, tag="again"))
    for _ in range(2):  # and the next opens pass, whenever the engine dropped them
        with EdgeStore(store_path) as store:
            assert store.count("c") == 300
    folder = _folder(store_path)
    assert set(seals.read(folder)) <= set(seals.sealed_segments(folder))
