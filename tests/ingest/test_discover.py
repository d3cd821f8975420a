"""Discovery: doc_ids, hidden dirs, symlinks, loops, unreadable dirs, odd names."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kbsync.ingest.discover import discover, parse_root
from kbsync.errors import UsageError


def _tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_doc_ids_are_root_name_and_posix_relative_path(tmp_path):
    share = tmp_path / "share"
    _tree(share, {"a.md": "x", "sub/b.txt": "y", "sub/deeper/c.md": "z"})
    found = discover(parse_root(str(share)))
    assert [f.doc_id for f in found.files] == ["share/a.md", "share/sub/b.txt",
                                               "share/sub/deeper/c.md"]
    assert found.files[1].rel_path == "sub/b.txt" and found.files[1].size == 1


def test_name_equals_path_sets_the_prefix(tmp_path):
    _tree(tmp_path / "x", {"a.md": "x"})
    found = discover(parse_root(f"wiki={tmp_path / 'x'}"))
    assert [f.doc_id for f in found.files] == ["wiki/a.md"]


def test_hidden_dirs_and_files_are_skipped(tmp_path):
    _tree(tmp_path, {".git/config": "x", ".hidden.md": "x", "ok.md": "y"})
    found = discover(parse_root(str(tmp_path)))
    assert [f.rel_path for f in found.files] == ["ok.md"]


def test_unsupported_files_are_ignored_not_listed(tmp_path):
    _tree(tmp_path, {"a.md": "x", "b.bin": "y"})
    found = discover(parse_root(str(tmp_path)), accept=lambda p: p.suffix == ".md")
    assert [f.rel_path for f in found.files] == ["a.md"]
    assert found.ignored == ["b.bin"]


def test_include_and_exclude_globs(tmp_path):
    _tree(tmp_path, {"a.md": "x", "b.txt": "y", "drafts/c.md": "z"})
    root = parse_root(str(tmp_path))
    assert [f.rel_path for f in discover(root, include=["*.md"]).files] == ["a.md", "drafts/c.md"]
    assert [f.rel_path for f in discover(root, exclude=["drafts/*"]).files] == ["a.md", "b.txt"]


def test_symlink_out_of_root_is_not_followed(tmp_path):
    outside = tmp_path / "outside"
    _tree(outside, {"secret.md": "s"})
    share = tmp_path / "share"
    _tree(share, {"a.md": "x"})
    (share / "escape").symlink_to(outside, target_is_directory=True)
    (share / "secret-link.md").symlink_to(outside / "secret.md")
    found = discover(parse_root(str(share)))
    assert [f.rel_path for f in found.files] == ["a.md"]
    assert {p.error for p in found.problems} == {"SymlinkOutsideRoot"}


def test_symlink_loop_terminates(tmp_path):
    _tree(tmp_path, {"d/a.md": "x"})
    (tmp_path / "d" / "loop").symlink_to(tmp_path / "d", target_is_directory=True)
    (tmp_path / "self").symlink_to(tmp_path / "self")  # a link to itself
    found = discover(parse_root(str(tmp_path)))
    assert [f.rel_path for f in found.files] == ["d/a.md"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every directory")
def test_unreadable_dir_is_reported(tmp_path):  # pragma: no cover - CI runs as root
    _tree(tmp_path, {"ok.md": "x", "locked/a.md": "y"})
    (tmp_path / "locked").chmod(0)
    try:
        found = discover(parse_root(str(tmp_path)))
    finally:
        (tmp_path / "locked").chmod(0o755)
    assert [f.rel_path for f in found.files] == ["ok.md"]
    assert found.problems[0].error == "PermissionDenied"


def test_non_utf8_name_gets_a_stable_escaped_doc_id(tmp_path):
    raw = os.path.join(os.fsencode(tmp_path), b"caf\xe9.md")
    with open(raw, "wb") as handle:
        handle.write(b"hello")
    found = discover(parse_root(str(tmp_path)))
    assert found.files[0].rel_path == "caf\\xe9.md"
    found.files[0].doc_id.encode("utf-8")  # valid UTF-8, JSON-safe
    assert found.files[0].path.read_bytes() == b"hello"


@pytest.mark.parametrize("spec", ["/no/such/dir", "x=/no/such/dir"])
def test_missing_root_is_a_usage_error(spec):
    with pytest.raises(UsageError, match="does not exist"):
        parse_root(spec)


def test_file_as_root_is_a_usage_error(tmp_path):
    (tmp_path / "f.md").write_text("x")
    with pytest.raises(UsageError, match="not a directory"):
        parse_root(str(tmp_path / "f.md"))
