"""Issue 22: a document is deleted only when its file is known to be gone.

A folder that can be listed but not entered (mode 444, as SMB and NFS mounts show it), a
folder that cannot be listed (000), an entry that cannot be stat'ed: their documents are
kept, counted in ``kept_unreadable`` and named in one warning, in full mode as in
incremental. The runs go without DAC override, as a plain user's would (root reads all).
"""

from __future__ import annotations

import os

import pytest

from kbtest import write_tree
from sec_helpers import indexed, needs_capsh, plain_ingest

pytestmark = needs_capsh


def _share(tmp_path):
    share = tmp_path / "share"
    files = {f"d1/a{i:02}.md": f"# A {i}\n\nalpha text {i}" for i in range(40)}
    files |= {f"d2/b{i}.md": f"# B {i}\n\nbravo text {i}" for i in range(5)}
    files |= {f"d3/c{i:02}.md": f"# C {i}\n\ncharlie text {i}" for i in range(30)}
    files |= {"gone.md": "# Gone\n\nthis file is deleted for real"}
    write_tree(share, files)
    # a link inside the root to a file of d3: once d3 cannot be entered, it cannot be stat'ed
    (share / "d1" / "link.md").symlink_to(share / "d3" / "c00.md")
    return share


@pytest.fixture
def synced(settings, tmp_path):
    share = _share(tmp_path)
    first = plain_ingest(share, mode="full")
    assert first["added"] == 77 and first["failed"] == 0, first
    yield share
    for folder in ("d3", "d2"):
        (share / folder).chmod(0o755)


@pytest.mark.parametrize("mode", ["full", "incremental"])
def test_a_folder_listed_but_not_entered_keeps_its_documents(settings, synced, mode):
    share = synced
    (share / "d3").chmod(0o444)
    (share / "gone.md").unlink()
    summary = plain_ingest(share, mode=mode, drop_dac=True)
    # 30 under d3 and the link into it: kept; gone.md: deleted in full mode only
    assert summary["deleted"] == (1 if mode == "full" else 0), summary
    assert summary["kept_unreadable"] == 31
    kept = [w for w in summary["warnings"] if "could not be read and were kept" in w]
    assert len(kept) == 1 and "and 26 more" in kept[0] and "share/d1/link.md" in kept[0], kept
    # one line for the folder, not one "Permission denied" per entry
    assert sum("share/d3" in w and "cannot be read" in w for w in summary["warnings"]) == 1
    assert not [w for w in summary["warnings"] if "c05.md" in w]
    left = indexed(settings)
    assert sum(d.startswith("share/d3/") for d in left) == 30
    assert "share/d1/link.md" in left
    assert ("share/gone.md" in left) == (mode == "incremental")


def test_a_folder_that_cannot_be_listed_keeps_its_documents(settings, synced):
    share = synced
    (share / "d2").chmod(0)
    summary = plain_ingest(share, mode="full", drop_dac=True)
    assert summary["deleted"] == 0 and summary["kept_unreadable"] == 5, summary
    assert sum(d.startswith("share/d2/") for d in indexed(settings)) == 5


def test_readable_again_everything_is_unchanged_and_nothing_was_lost(settings, synced):
    share = synced
    (share / "d3").chmod(0o444)
    plain_ingest(share, mode="full", drop_dac=True)
    (share / "d3").chmod(0o755)
    again = plain_ingest(share, mode="full", drop_dac=True)
    assert (again["unchanged"], again["added"], again["deleted"]) == (77, 0, 0), again
    assert again["kept_unreadable"] == 0


def test_an_unreadable_file_is_a_failure_and_keeps_its_document(settings, synced):
    share = synced
    os.chmod(share / "d1" / "a00.md", 0)  # stat works, open does not (mode 000 file)
    os.utime(share / "d1" / "a00.md", ns=(1, 1))  # so it must be read again
    try:
        summary = plain_ingest(share, mode="full", drop_dac=True)
    finally:
        os.chmod(share / "d1" / "a00.md", 0o644)
    assert summary["deleted"] == 0 and summary["failed"] == 1, summary
    assert "share/d1/a00.md" in indexed(settings)


@pytest.mark.parametrize("per_slice", ["1", "7"])
def test_in_slices_the_unreadable_are_kept_and_the_gone_deleted(settings, synced, monkeypatch,
                                                                 per_slice):
    """A root planned a few files at a time: the folder that cannot be entered and the gone
    file fall in other slices than most of the root, and the last slice still keeps the one
    and deletes the other (its walk met the folder's problem in an earlier slice)."""
    monkeypatch.setenv("KBSYNC_PLAN_SLICE_FILES", per_slice)
    share = synced
    (share / "d3").chmod(0o444)
    (share / "gone.md").unlink()
    summary = plain_ingest(share, mode="full", drop_dac=True)
    assert summary["deleted"] == 1 and summary["kept_unreadable"] == 31, summary
    assert sum("share/d3" in w and "cannot be read" in w for w in summary["warnings"]) == 1
    left = indexed(settings)
    assert sum(d.startswith("share/d3/") for d in left) == 30
    assert "share/d1/link.md" in left and "share/gone.md" not in left
