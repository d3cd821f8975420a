"""No file name drives the reader's terminal (issue 22, Security: terminal escapes).

Real files with hostile names are ingested (kbsync's plain runner, hash
embeddings), then the real ``kbsync search`` runs as a subprocess: its human
output carries no control character of the names (shown as ``\\x1b``,
``\\u202e``), names that look like rich markup print as themselves, and
``--json`` keeps the exact doc_id. The other printing paths (ingest summary,
error line, log lines) are checked at the functions the CLI prints through.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kbsync.app import cli_support, console
from kbsync.app.terminal import json_terminal_safe, terminal_safe

KBSYNC = str(Path(sys.executable).with_name("kbsync"))
ESC_NAME = "esc\x1b[31mred.md"
BIDI_NAME = "report\u202edm.exe.md"  # shows as "report" + "exe.md" reversed: a spoofed type
MARKUP_NAME = "[red]tag.md"  # rich markup, if printed inside markup unescaped
RAW_CONTROLS = ("\x1b", "\u202e", "\x9b")


@pytest.fixture
def indexed(tmp_path: Path, settings) -> Path:
    """A store holding one document per hostile name (each with the word ``marker``)."""
    from kbsync.runtime import Runtime
    from kbsync.ingest.discover import parse_root
    from kbsync.ingest.runner import run_plain

    share = tmp_path / "share"
    share.mkdir()
    for i, name in enumerate((ESC_NAME, BIDI_NAME, MARKUP_NAME)):
        (share / name).write_text(f"# Title {i}\n\nmarker text number {i}.\n", encoding="utf-8")
    runtime = Runtime.open(settings)
    try:
        summary = run_plain([parse_root(str(share))], runtime=runtime)
    finally:
        runtime.close()  # the CLI below opens the store itself
    assert summary.added == 3 and summary.failed == 0, summary.failures
    return share


def _search(*args: str, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR")}
    full.update(env)
    return subprocess.run([KBSYNC, "search", "marker", "-k", "5", *args], env=full,
                          capture_output=True, timeout=300)


@pytest.mark.parametrize("colour", [False, True], ids=["pipe", "forced-colour"])
def test_search_citations_show_names_escaped(indexed, colour):
    proc = _search(**({"FORCE_COLOR": "1", "COLUMNS": "200"} if colour else {}))
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout.decode("utf-8")
    if not colour:  # rich adds no styling into a pipe: any ESC would be the name's
        assert b"\x1b" not in proc.stdout
    assert "\x1b[31mred" not in text and "\u202e" not in text
    assert "share/esc\\x1b[31mred.md" in text
    assert "share/report\\u202edm.exe.md" in text
    assert "share/[red]tag.md" in text  # markup in a name is shown, not applied


def test_search_json_keeps_the_exact_doc_ids(indexed):
    proc = _search("--json")
    assert proc.returncode == 0, proc.stderr
    assert b"\x1b" not in proc.stdout and "\u202e".encode() not in proc.stdout
    doc_ids = {hit["doc_id"] for hit in json.loads(proc.stdout)["results"]}
    assert doc_ids == {f"share/{name}" for name in (ESC_NAME, BIDI_NAME, MARKUP_NAME)}


def test_ingest_summary_failures_and_warnings_are_escaped(capsys):
    from kbsync.ingest.summary import IngestSummary

    summary = IngestSummary(run_id="r", namespace="default", collection="kbsync",
                            mode="incremental", dry_run=False, files_seen=1, failed=1).to_dict()
    summary["failures"] = [{"doc_id": f"share/{ESC_NAME}", "error": "CorruptDocument",
                            "message": "bad\rOK"}]
    summary["warnings"] = [f"symlink points outside the root: share/[/]{BIDI_NAME}"]
    console.print_ingest(summary)  # "[/]" unescaped would raise rich's MarkupError
    shown = capsys.readouterr().out
    assert not any(c in shown for c in (*RAW_CONTROLS, "\r"))
    assert f"share/{terminal_safe(ESC_NAME)}: CorruptDocument: bad\\x0dOK" in shown
    assert "share/[/]report\\u202edm.exe.md" in shown


def test_the_error_line_and_log_lines_are_escaped(capsys):
    cli_support.print_error(1, "StoreError", f"cannot read share/{ESC_NAME}\nforged line")
    line = capsys.readouterr().err
    assert line == "kbsync: StoreError: cannot read share/esc\\x1b[31mred.md\\x0aforged line\n"
    record = logging.LogRecord("kbsync.ingest", logging.WARNING, __file__, 1,
                               "skipped %s", (f"share/{BIDI_NAME}",), None)
    assert "\u202e" not in cli_support.OneLineFormatter().format(record)
    assert "share/report\\u202edm.exe.md" in cli_support.OneLineFormatter().format(record)


def test_the_sanitizer_escapes_controls_and_keeps_text():
    assert terminal_safe("a\tb\nc \u00e9\u4e2d\U0001f600") == "a\tb\nc \u00e9\u4e2d\U0001f600"
    assert terminal_safe("a\nb", one_line=True) == "a\\x0ab"
    assert terminal_safe("\x00\x07\x7f\x85\x9b\u2066\u2028") == \
        "\\x00\\x07\\x7f\\x85\\x9b\\u2066\\u2028"
    encoded = json_terminal_safe(json.dumps({"n": "x\x9b\u202ey\x1b"}, ensure_ascii=False))
    assert not any(c in encoded for c in RAW_CONTROLS)
    assert json.loads(encoded) == {"n": "x\x9b\u202ey\x1b"}  # the same value
