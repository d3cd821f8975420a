"""Links leading out of a root are each recorded, but the log names only the first few per
root and kind, then one line with the rest (issue 22: a share whose 60 files were swapped
for links logged 60 warnings)."""

from __future__ import annotations

import logging

from kbsync.errors import ErrorCode
from kbsync.ingest import discover as discover_module
from kbsync.ingest.discover import LOGGED_PER_KIND, discover, parse_root


def test_escaping_links_past_the_limit_are_one_line(tmp_path, caplog):
    outside = tmp_path / "secret.md"
    outside.write_text("# secret\n")
    share = tmp_path / "share"
    share.mkdir()
    (share / "kept.md").write_text("# kept\n")
    links = 12
    for n in range(links):
        (share / f"link{n:02d}.md").symlink_to(outside)

    with caplog.at_level(logging.WARNING, logger=discover_module.log.name):
        result = discover(parse_root(str(share)))

    assert [f.doc_id for f in result.files] == ["share/kept.md"]
    escaped = [p for p in result.problems if p.error == ErrorCode.SymlinkOutsideRoot]
    assert len(escaped) == links  # every one still reported in the JSON's warnings
    lines = [r.getMessage() for r in caplog.records]
    assert len([ln for ln in lines if ln.startswith("skipped ")]) == LOGGED_PER_KIND
    assert lines[-1] == (f"root share: {links - LOGGED_PER_KIND} more entries skipped "
                         "(SymlinkOutsideRoot); the JSON's warnings list them all")


def test_a_quiet_walk_logs_nothing(tmp_path, caplog):
    outside = tmp_path / "secret.md"
    outside.write_text("x")
    share = tmp_path / "share"
    share.mkdir()
    for n in range(LOGGED_PER_KIND + 3):
        (share / f"l{n}.md").symlink_to(outside)
    with caplog.at_level(logging.WARNING, logger=discover_module.log.name):
        result = discover(parse_root(str(share)), quiet=True)
    assert len(result.problems) == LOGGED_PER_KIND + 3 and not caplog.records
