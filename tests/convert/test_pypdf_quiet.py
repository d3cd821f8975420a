"""pypdf's warnings on a broken PDF are notes of ours, never raw lines on stderr (issue 41).

pypdf logs "invalid pdf header" and "EOF marker not found" on its own logger; with no
handler configured (a conversion worker process, the CLI) Python's last-resort handler
printed them on stderr. They go through ``kbsync.convert.pdf_fallback``'s logger at DEBUG now, and
into the file's failure message or notes.
"""

from __future__ import annotations

import logging

import pytest

from kbsync.convert.pdf import convert_pdf
from kbsync.errors import CorruptDocument
from kbtest import hash_env, run_kbsync, write_tree


def test_a_broken_pdf_puts_nothing_on_stderr_and_notes_what_pypdf_said(capfd, caplog):
    caplog.set_level(logging.DEBUG, logger="kbsync.convert")
    with pytest.raises(CorruptDocument) as raised:
        convert_pdf(b"this is not really a pdf at all", name="broken.pdf")
    err = capfd.readouterr().err
    assert "invalid pdf header" not in err and "EOF marker" not in err, err
    assert "pypdf noted: invalid pdf header" in str(raised.value), raised.value
    assert any(r.levelno == logging.DEBUG and r.getMessage().startswith("pypdf: ")
               for r in caplog.records), caplog.records


@pytest.mark.slow  # a CLI ingest with conversion worker processes: ~20 s
def test_a_cli_ingest_of_a_broken_pdf_has_no_pypdf_noise(prefect_api, tmp_path):
    share = tmp_path / "share"
    write_tree(share, {"good.md": "# Good\n\nFine text."})
    (share / "broken.pdf").write_bytes(b"this is not really a pdf at all")
    (share / "cut.pdf").write_bytes(b"%PDF-1.7 this is not really a pdf")
    env = hash_env(prefect_api, tmp_path / "home", KBSYNC_CONVERT_ISOLATION="true")
    code, _, err = run_kbsync(env, "ingest", str(share))
    assert code == 3, err
    assert "invalid pdf header" not in err and "EOF marker not found" not in err, err
