"""OCR stays inside the file's limits (issue 37, "the conversion time limit does not hold
under OCR").

Invariants (docs/formats.md, *Bounded*):
- ``KBSYNC_CONVERT_TIMEOUT_S`` is one deadline per file, OCR included: each page read never
  extends it, so a TIFF of many blank frames fails with ``ConversionTimeout`` near the limit
  (before the fix each page reset the deadline: 500 frames ran for minutes);
- a file with more pages to OCR than ``KBSYNC_OCR_MAX_PAGES`` fails with ``FileTooLarge``,
  one line naming the count, the cap and the setting, before any page is read.

Real files (Pillow TIFFs, PyMuPDF scans), real Tesseract, real worker processes, and the real
CLI for the page cap. The tests that run Tesseract or the CLI are in the slow tier.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pymupdf
import pytest

from kbsync.convert import OcrConfig, convert
from kbsync.convert.isolate import IsolatedConverter
from kbsync.errors import ConversionTimeout, FileTooLarge
from kbtest import KBSYNC, hash_env, write_tree
from tests.scans import ENGLISH, add_scanned_page, add_text_page, tesseract_missing

needs_tesseract = pytest.mark.skipif(tesseract_missing() is not None,
                                     reason=tesseract_missing() or "")


def blank_tiff(path: Path, frames: int, size: int = 300) -> Path:
    """A multi-frame TIFF of ``frames`` blank white pages (Pillow)."""
    image = pytest.importorskip("PIL.Image")
    first, *rest = (image.new("L", (size, size), 255) for _ in range(frames))
    first.save(path, save_all=True, append_images=rest, compression="tiff_deflate")
    return path


@needs_tesseract
@pytest.mark.slow
def test_the_file_limit_holds_whatever_the_pages(tmp_path):
    """400 blank frames, a 3 s file limit and a 60 s page limit: the file fails near 3 s."""
    tiff = blank_tiff(tmp_path / "blank.tiff", 400)
    ocr = OcrConfig(enabled=True, languages="eng", page_timeout_s=60, max_pages=10_000)
    limit = 3.0
    with IsolatedConverter(workers=1, timeout_s=limit, memory_mb=None) as pool:
        started = time.monotonic()
        with pytest.raises(ConversionTimeout) as caught:
            pool.convert(tiff, doc_id="s/blank.tiff", ocr=ocr)
        elapsed = time.monotonic() - started
        assert elapsed < limit + 15, f"the file held its worker {elapsed:.1f} s"
        message = str(caught.value)
        assert message == (f"{tiff}: conversion with OCR took over 3 s, the limit per file "
                           "whatever its pages; worker killed (raise KBSYNC_CONVERT_TIMEOUT_S "
                           "for long scans)")
        # The worker killed was replaced: the next file converts in the same pool.
        small = blank_tiff(tmp_path / "one.tiff", 1)
        with pytest.raises(Exception) as empty:  # a blank page: no text, but no timeout
            pool.convert(small, doc_id="s/one.tiff", ocr=ocr)
        assert type(empty.value).__name__ == "EmptyDocument"


def test_a_tiff_over_the_page_cap_fails_before_any_page_is_read(tmp_path):
    """No Tesseract needed: the cap is checked on the frame count, before OCR starts."""
    tiff = blank_tiff(tmp_path / "many.tiff", 6, size=16)
    ocr = OcrConfig(enabled=True, languages="eng", max_pages=5)
    with pytest.raises(FileTooLarge) as caught:
        convert(tiff, doc_id="s/many.tiff", ocr=ocr)
    assert str(caught.value) == (f"{tiff}: 6 pages to OCR, over the limit of 5 pages per file "
                                 "(KBSYNC_OCR_MAX_PAGES); nothing of it was indexed")


def test_the_cap_counts_a_pdfs_scanned_pages_only(tmp_path):
    pdf = pymupdf.open()
    add_text_page(pdf)
    for _ in range(3):
        add_scanned_page(pdf, [(ENGLISH, "helv")], dpi=50)
    path = tmp_path / "mixed.pdf"
    path.write_bytes(pdf.tobytes())
    with pytest.raises(FileTooLarge, match=r"mixed.pdf: 3 pages to OCR, over the limit of 2 "
                                           r"pages per file \(KBSYNC_OCR_MAX_PAGES\)"):
        convert(path, doc_id="s/mixed.pdf", ocr=OcrConfig(enabled=True, max_pages=2))
    # OCR off: the cap does not apply (the scanned pages are skipped, as before).
    assert "lighthouse" in convert(path, doc_id="s/mixed.pdf").markdown


@needs_tesseract
@pytest.mark.slow
def test_the_cli_reports_a_file_over_the_page_cap_in_one_line(tmp_path):
    share = tmp_path / "share"
    write_tree(share, {"note.md": "# Note\n\nthe harbour opens at dawn\n"})
    blank_tiff(share / "scan.tiff", 12, size=16)
    env = hash_env(None, tmp_path / "home", KBSYNC_OCR="true", KBSYNC_OCR_LANGUAGES="eng",
                   KBSYNC_OCR_MAX_PAGES="10", KBSYNC_CONVERT_ISOLATION="true")
    proc = subprocess.run([KBSYNC, "ingest", str(share), "--json"], env=env, capture_output=True,
                          text=True, timeout=300)
    summary = json.loads(proc.stdout)
    assert proc.returncode == 3, proc.stderr[-2000:]  # EXIT_PARTIAL: some files failed
    assert summary["added"] == 1 and summary["failed"] == 1, summary
    (failure,) = summary["failures"]
    assert failure["error"] == "FileTooLarge", failure
    assert failure["message"].endswith("scan.tiff: 12 pages to OCR, over the limit of 10 pages "
                                       "per file (KBSYNC_OCR_MAX_PAGES); nothing of it was "
                                       "indexed"), failure
    assert "Traceback" not in proc.stderr
