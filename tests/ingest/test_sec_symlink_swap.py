"""Issue 22: a link swapped in after the plan is never followed out of the root.

A share owned by another local user (made with ``useradd``), ingested by root. As soon
as the plan is logged, that user replaces the planned files with links to a file only
root may read. The read itself checks where the opened file really is, so the secret is
never indexed; and what was indexed through a link that now leads out of the root is
deleted by the next run, in every mode.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from kbsync.convert import convert
from kbsync.errors import SymlinkOutsideRoot
from kbsync.ingest.discover import hash_file, parse_root
from kbsync.ingest.runner import run_plain
from kbsync.models import SyncMode

USER = "kbs22swap"
SECRET = "TOPSECRET root only payroll figures"


@pytest.fixture(scope="module")
def other_user():
    """A second local user (removed afterwards), or a skip where none can be made."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("needs root and useradd to make a second local user")
    made = subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", USER],
                          capture_output=True, text=True)
    if made.returncode not in (0, 9):  # 9: exists (a previous run's)
        pytest.skip(f"useradd refused: {made.stderr.strip()}")
    yield USER
    subprocess.run(["userdel", USER], capture_output=True)


@pytest.fixture
def place(other_user):
    """A folder others can enter, holding the other user's share and root's secret."""
    base = Path(tempfile.mkdtemp(prefix="kbsync-sec22-"))
    base.chmod(0o755)
    secret = base / "secret.txt"
    secret.write_text(SECRET + "\n")
    secret.chmod(0o600)
    share = base / "share"
    share.mkdir()
    yield share, secret
    shutil.rmtree(base)


def _as_user(script: str) -> None:
    """Run ``sh -c script`` as the other user."""
    subprocess.run(["runuser", "-u", USER, "--", "sh", "-c", script], check=True)


def _give(share: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (share / rel).parent.mkdir(parents=True, exist_ok=True)
        (share / rel).write_text(text)
    subprocess.run(["chown", "-R", f"{USER}:{USER}", str(share)], check=True)


def _indexed(runtime) -> dict[str, str]:
    found: dict[str, str] = {}
    for point in runtime.store.scroll(runtime.collection):
        found[point.payload["doc_id"]] = found.get(point.payload["doc_id"], "") + point.payload["text"]
    return found


class _SwapAfterPlan(logging.Handler):
    """Runs ``action`` once, when the runner logs a root's plan (before any file is read
    for conversion): the moment the other user acts on."""

    def __init__(self, action) -> None:
        super().__init__(logging.INFO)
        self.action, self.fired = action, False

    def emit(self, record: logging.LogRecord) -> None:
        if not self.fired and "to delete" in record.getMessage():
            self.fired = True
            self.action()


@pytest.fixture(params=["in-process", "isolated"])
def any_runtime(request, settings, monkeypatch):
    from kbsync.runtime import Runtime
    from kbsync.settings import Settings

    if request.param == "isolated":  # the default: conversion in worker processes
        monkeypatch.setenv("KBSYNC_CONVERT_ISOLATION", "true")
        monkeypatch.setenv("KBSYNC_CONVERT_WORKERS", "1")
    rt = Runtime.open(Settings())
    yield rt
    rt.close()


def test_files_swapped_for_links_after_the_plan_are_not_read(any_runtime, place, caplog):
    share, secret = place
    names = [f"n{i}.md" for i in range(20)]
    _give(share, {name: f"# Note {name}\n\nharmless note {name}" for name in names})
    swap = " ; ".join(f"ln -sf {secret} {share / n}" for n in names)
    hook = _SwapAfterPlan(lambda: _as_user(swap))
    caplog.set_level(logging.INFO, logger="kbsync.ingest.runner")
    logging.getLogger("kbsync.ingest.runner").addHandler(hook)
    try:
        summary = run_plain([parse_root(str(share))], runtime=any_runtime).to_dict()
    finally:
        logging.getLogger("kbsync.ingest.runner").removeHandler(hook)
    assert hook.fired and all((share / n).is_symlink() for n in names)
    assert not any(SECRET in text for text in _indexed(any_runtime).values())
    assert summary["added"] == 0 and summary["failed"] == 20, summary
    assert {f["error"] for f in summary["failures"]} == {"SymlinkOutsideRoot"}
    assert "outside its root" in summary["failures"][0]["message"]


@pytest.mark.parametrize("mode", [SyncMode.INCREMENTAL, SyncMode.FULL])
def test_what_was_indexed_through_a_link_now_leading_out_is_deleted(runtime, place, mode):
    share, secret = place
    _give(share, {"real/target.md": "# Target\n\nshared words", "keep.md": "# Keep\n\nstays"})
    (share / "link.md").symlink_to(share / "real" / "target.md")  # inside: indexed
    (share / "dlink").symlink_to(share / "real", target_is_directory=True)
    first = run_plain([parse_root(str(share))], runtime=runtime).to_dict()
    # each real folder is walked once: real/ as dlink/ (first in name order)
    assert first["added"] == 3 and "share/dlink/target.md" in _indexed(runtime), first
    # the other user turns both links outward (a file, and a folder above a file)
    _as_user(f"ln -sfn {secret} {share / 'link.md'} && ln -sfn {secret.parent} {share / 'dlink'}")
    summary = run_plain([parse_root(str(share))], runtime=runtime, mode=mode).to_dict()
    left = _indexed(runtime)
    assert "share/link.md" not in left and "share/dlink/target.md" not in left, sorted(left)
    assert {"share/keep.md", "share/real/target.md"} <= set(left)
    assert summary["deleted"] == 2, summary
    lines = [w for w in summary["warnings"] if "lead outside the root" in w]
    assert len(lines) == 1 and "share/dlink/target.md" in lines[0]
    assert not any(SECRET in text for text in left.values())


def test_reads_check_the_opened_file_not_the_path(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "d").mkdir(parents=True)
    outside.mkdir()
    (outside / "s.md").write_text(SECRET)
    (root / "d" / "ok.md").write_text("# Ok\n\nfine")
    (root / "file-link.md").symlink_to(outside / "s.md")
    (root / "dir-link").symlink_to(outside, target_is_directory=True)
    (root / "inner-link.md").symlink_to(root / "d" / "ok.md")  # inside: allowed
    resolved = root.resolve()
    for path in (root / "file-link.md", root / "dir-link" / "s.md"):
        with pytest.raises(SymlinkOutsideRoot, match="outside its root"):
            convert(path, doc_id="r/x.md", within=resolved)
        with pytest.raises(SymlinkOutsideRoot):
            hash_file(path, resolved)
    assert "fine" in convert(root / "inner-link.md", doc_id="r/i.md", within=resolved).markdown
    assert hash_file(root / "inner-link.md", resolved) == hash_file(root / "d" / "ok.md")


def test_without_proc_the_path_is_resolved_and_compared_with_the_open_file(tmp_path, monkeypatch,
                                                                          caplog):
    from kbsync.convert import safe_read

    real_readlink = os.readlink

    def no_proc(path, *args, **kwargs):
        if str(path).startswith("/proc/self/fd/"):
            raise FileNotFoundError(path)  # as in a chroot without /proc
        return real_readlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "readlink", no_proc)
    monkeypatch.setattr(safe_read, "_warned", False)
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "s.md").write_text(SECRET)
    (root / "ok.md").write_text("# Ok\n\nfine")
    (root / "link.md").symlink_to(outside / "s.md")
    with caplog.at_level(logging.WARNING, logger="kbsync.convert.safe_read"):
        assert "fine" in convert(root / "ok.md", doc_id="r/ok.md", within=root.resolve()).markdown
        with pytest.raises(SymlinkOutsideRoot):
            convert(root / "link.md", doc_id="r/link.md", within=root.resolve())
    assert sum("/proc/self/fd is not available" in r.getMessage() for r in caplog.records) == 1
