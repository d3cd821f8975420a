"""Issue 22: a share's README, Makefile, TSV and EML files are indexed; what is still
ignored is counted by kind in the summary (``ignored_by_kind``) and on the terminal."""

from __future__ import annotations

from kbtest import write_tree

from kbsync.app.console import print_ingest
from kbsync.ingest.discover import parse_root
from kbsync.ingest.runner import run_plain

MAIL = ("Subject: Zephyr launch\nFrom: ada@example.org\nTo: team@example.org\n"
        "Content-Type: text/plain; charset=utf-8\n\nThe zephyr launch moves to March.\n")


def test_files_without_extension_tsv_and_eml_are_indexed_and_the_rest_counted(runtime, tmp_path):
    share = tmp_path / "share"
    write_tree(share, {"README": "Zephyr\n======\n\nRead me first: zephyr setup steps.\n",
                       "Makefile": "build:\n\tcc zephyr.c\n", "sheet.tsv": "k\tv\nalpha\t1\n",
                       "launch.eml": MAIL, **{f"memo{i}.rtf": r"{\rtf1 memo}" for i in range(3)}})
    (share / "zephyr").write_bytes(b"\x7fELF\x00\x00binary")
    (share / "core").write_bytes(b"")
    summary = run_plain([parse_root(str(share))], runtime=runtime).to_dict()
    assert (summary["added"], summary["failed"], summary["ignored"]) == (4, 0, 5), summary
    assert summary["ignored_by_kind"] == {"(no extension)": 2, ".rtf": 3}
    texts = {p.payload["doc_id"]: p.payload["text"] for p in runtime.store.scroll(runtime.collection)}
    assert "zephyr setup steps" in texts["share/README"]
    assert "moves to March" in texts["share/launch.eml"]
    again = run_plain([parse_root(str(share))], runtime=runtime).to_dict()
    assert again["unchanged"] == 4 and again["ignored_by_kind"] == summary["ignored_by_kind"]


def test_the_terminal_summary_names_what_was_ignored(capsys):
    summary = {"namespace": "default", "dry_run": False, "mode": "incremental", "failures": [],
               "warnings": [], "ignored_by_kind": {".rtf": 3, "(no extension)": 2},
               **{k: 0 for k in ("files_seen", "added", "updated", "unchanged", "deleted",
                                 "failed", "chunks_raw", "chunks_kept", "embeddings_computed",
                                 "embeddings_cached", "embeddings_failed", "duration_s")},
               "ignored": 5}
    print_ingest(summary)
    assert "ignored: 3 .rtf, 2 (no extension)" in capsys.readouterr().out


def test_per_root_summaries_add_their_ignored_kinds():
    from kbsync.ingest.summary import IngestSummary

    total = IngestSummary(run_id="r", namespace="n", collection="c", mode="full", dry_run=False)
    for part in ({".rtf": 1}, {".rtf": 2, "(no extension)": 1}):
        piece = IngestSummary(run_id="r", namespace="n", collection="c", mode="full",
                              dry_run=False, ignored=sum(part.values()), ignored_by_kind=part)
        total.merge(piece.to_dict())
    assert (total.ignored, total.ignored_by_kind) == (4, {"(no extension)": 1, ".rtf": 3})
