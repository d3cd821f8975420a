"""The per-file shortcuts of a plan (issue 42: a no-op sync of 100,000 files) give what
the general ways gave: the walk's paths, a hashed copy of a file, a parsed state record
and a point id check."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kbsync.errors import UsageError
from kbsync.ingest.discover import discover, parse_root
from kbsync.ingest.walk import _child
from kbsync.models import DocState, DocStatus, SourceFile
from kbsync.store.validate import check_point_id
from kbtest import write_tree


def test_the_walks_paths_are_the_paths_parsed(tmp_path):
    write_tree(tmp_path / "share", {"a.md": "a", "sub/b.md": "b", "sub/deep/c.txt": "c"})
    files = discover(parse_root(str(tmp_path / "share"))).files
    assert [f.rel_path for f in files] == ["a.md", "sub/b.md", "sub/deep/c.txt"]
    for source in files:
        assert type(source.path) is type(Path(str(source.path)))
        assert source.path == Path(str(source.path)) == source.root_path / source.rel_path
        assert source.path.name == source.rel_path.rsplit("/", 1)[-1]
    assert _child(Path("/a/b"), "c.md") == Path("/a/b/c.md")


def test_with_hash_copies_every_other_field():
    source = SourceFile(doc_id="r/a.md", root="r", path=Path("/s/a.md"), rel_path="a.md",
                        size=3, mtime_ns=7, root_path=Path("/s"), access="p1",
                        access_grants=("g1", "g2"))
    assert source.with_hash("h") == dataclasses.replace(source, content_hash="h")
    names = {f.name for f in dataclasses.fields(SourceFile)}
    assert names == {"doc_id", "root", "path", "rel_path", "size", "mtime_ns", "content_hash",
                     "root_path", "access", "access_grants"}  # a new field: add it to with_hash


def _state(**changes) -> DocState:
    state = DocState(doc_id="r/a.md", namespace="default", root="r", path="/s/a.md",
                     content_hash="h", fingerprint="f", chunk_count=2, status=DocStatus.PARTIAL,
                     updated_at="2026-01-01T00:00:00+00:00", run_id="run", size=3, mtime_ns=7,
                     scanned_pages=1, access="p1")
    return dataclasses.replace(state, **changes)


@pytest.mark.parametrize("state", [_state(), _state(scanned_pages=None, access=None)])
def test_a_record_reads_back_as_written(state):
    back = DocState.from_payload({**state.to_payload(), "unknown": 1})
    assert back == state and back.status is state.status


def test_an_older_record_without_the_optional_fields_still_reads():
    payload = _state().to_payload()
    del payload["scanned_pages"], payload["access"], payload["status"]
    back = DocState.from_payload(payload)
    assert back.scanned_pages is None and back.access is None and back.status is DocStatus.OK


def test_a_record_with_an_unknown_status_is_refused():
    with pytest.raises(ValueError):
        DocState.from_payload({**_state().to_payload(), "status": "weird"})


def test_point_ids_must_be_canonical_uuids():
    good = "0f1c2d3e-4b5a-4c6d-8e7f-0a1b2c3d4e5f"
    assert check_point_id(good) == good
    for bad in [good.upper(), "{" + good + "}", "urn:uuid:" + good, good.replace("-", ""),
                good + "\n", good[:-1], good[:-1] + "g", 5, None]:
        with pytest.raises(UsageError):
            check_point_id(bad)  # type: ignore[arg-type]
