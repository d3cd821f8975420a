"""What a run says about permissions (issue 39): a share only its owner may read, documents
whose permissions cannot be read, owners that no longer exist."""

from __future__ import annotations

import os

import pytest

from kbsync.catalog.access import allowed_ids, load_profiles
from kbsync.ingest.runner import run_plain
from kbsync.models import RootSpec
from kbsync.perms.reader import Reader
from kbtest import write_tree
from perm_users import open_folder

FILES = {f"d/f{i}.md": f"# F{i}\n\nvolcano notes {i}." for i in range(4)}


def test_a_share_only_its_owner_may_read_is_indexed_and_says_so(runtime) -> None:
    with open_folder("kbsync-perms-owner") as base:
        share = base / "share"
        write_tree(share, FILES)
        for path in share.rglob("*.md"):
            path.chmod(0o600)
        summary = run_plain([RootSpec(name="share", path=share)], runtime=runtime)
        assert summary.added == 4 and summary.owner_only == 4
        assert any("can be read only by their owner" in w and "other readers will find nothing"
                   in w for w in summary.warnings)
        (share / "d/f0.md").chmod(0o644)
        again = run_plain([RootSpec(name="share", path=share)], runtime=runtime)
        assert again.permissions_updated == 1 and again.owner_only == 3
        assert not any("only by their owner" in w for w in again.warnings)
        # The owner's own folder closed: f0.md too is the owner's only (its folder decides).
        (share / "d").chmod(0o700)
        closed = run_plain([RootSpec(name="share", path=share)], runtime=runtime)
        assert closed.permissions_updated == 4 and closed.owner_only == 4
        assert any("can be read only by their owner" in w for w in closed.warnings)


def test_documents_whose_permissions_cannot_be_read_are_named_once(runtime, tmp_path,
                                                                   monkeypatch) -> None:
    share = tmp_path / "share"
    write_tree(share, FILES)
    real = os.getxattr

    def refuse(path, name, *args, **kwargs):
        if str(path).endswith(("f1.md", "f2.md")):
            raise PermissionError(1, "Operation not permitted")
        return real(path, name, *args, **kwargs)

    monkeypatch.setattr(os, "getxattr", refuse)
    summary = run_plain([RootSpec(name="share", path=share)], runtime=runtime)
    assert summary.added == 4 and summary.permissions_unreadable == 2
    [warning] = [w for w in summary.warnings if "permissions cannot be read" in w]
    assert "share/d/f1.md" in warning and "share/d/f2.md" in warning and "root only" in warning


def test_an_owner_with_no_passwd_entry_reads_as_other(runtime) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to chown to a uid that does not exist")
    ghost = 54321
    with open_folder("kbsync-perms-ghost") as base:
        share = base / "share"
        write_tree(share, FILES)
        for i, mode in enumerate((0o600, 0o604, 0o640, 0o644)):
            path = share / f"d/f{i}.md"
            os.chown(path, ghost, ghost)
            path.chmod(mode)
        run_plain([RootSpec(name="share", path=share)], runtime=runtime)
    readable = set(allowed_ids(load_profiles(runtime.states), [Reader.of_uid(ghost)]))
    seen = {doc for doc, state in runtime.states.load("default").items() if state.access in readable}
    # Its own files' owner bits do not help a uid without a passwd entry: "other" only.
    assert seen == {"share/d/f1.md", "share/d/f3.md"}
