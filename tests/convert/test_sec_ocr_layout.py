"""OCR reads the whole page (issue 22): the page segmentation, and pages whose ink went unread.

Tesseract's automatic layout (psm 3) read none of a generated three-line Chinese scan whole,
at 200 dpi or 300, and kbsync indexed the fragment without a word. kbsync now reads a page
again as one column (psm 4), then as one block (psm 6), while the words found cover under 90%
of its ink or their confidence is under 85, and names a page still under 60% of its ink in
the document's warnings. Needs Tesseract with eng and chi_sim.
"""

from __future__ import annotations

import numpy as np
import pymupdf
import pytest

from kbsync.convert import OcrConfig, convert
from kbsync.convert.ocr_coverage import MIN_COVERAGE, coverage_warning, ink_coverage
from tests.scans import (
    LAYOUTS,
    THREE_LINES,
    add_text_page,
    char_recall,
    draw_layout,
    tesseract_missing,
    three_line_pdf,
)

needs_tesseract = pytest.mark.skipif(tesseract_missing() is not None,
                                     reason=tesseract_missing() or "")
COVERAGE_WARNING = "OCR may have missed text"


def write(tmp_path, name: str, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return path


@needs_tesseract
@pytest.mark.parametrize("dpi", [200, 300])
def test_a_three_line_chinese_scan_yields_all_three_lines(tmp_path, dpi):
    path = write(tmp_path, "three.pdf", three_line_pdf())
    doc = convert(path, doc_id="s/three.pdf", ocr=OcrConfig(enabled=True, dpi=dpi))
    for line in THREE_LINES:
        assert char_recall([line], doc.markdown) >= 0.8, (line, doc.markdown)
    assert list(doc.ocr_pages) == [1]
    assert not any(COVERAGE_WARNING in w for w in doc.warnings), doc.warnings


@needs_tesseract
def test_a_page_whose_ink_went_unread_is_flagged_with_its_number(tmp_path):
    """Automatic layout alone (the old segmentation) leaves most of the scan's ink unread:
    the page is named, with its coverage, though Tesseract's confidence says nothing."""
    pdf = pymupdf.open()
    add_text_page(pdf)
    pdf.insert_pdf(pymupdf.open(stream=three_line_pdf()))
    path = write(tmp_path, "mixed.pdf", pdf.tobytes())
    doc = convert(path, doc_id="s/mixed.pdf", ocr=OcrConfig(enabled=True, dpi=200, psm=(3,)))
    flagged = [w for w in doc.warnings if COVERAGE_WARNING in w]
    assert len(flagged) == 1 and "on page 2 (" in flagged[0], doc.warnings
    assert "page 1 " not in flagged[0] and "\n" not in flagged[0]


@needs_tesseract
@pytest.mark.parametrize("lang", ["eng", "chi"])
def test_whole_page_reads_of_every_layout_are_not_flagged(tmp_path, lang):
    """The default segmentation on the benchmark's layouts: most of each page read, in one
    PDF, and no page flagged (the threshold leaves the reads that worked alone)."""
    src = pymupdf.open()
    truth = []
    for layout in LAYOUTS:
        truth.append(draw_layout(src.new_page(), layout, lang))
    scan = pymupdf.open()
    for page in src:
        pix = page.get_pixmap(dpi=200, colorspace=pymupdf.csGRAY)
        target = scan.new_page(width=page.rect.width, height=page.rect.height)
        target.insert_image(target.rect, stream=pix.tobytes("png"))
    path = write(tmp_path, f"{lang}.pdf", scan.tobytes())
    doc = convert(path, doc_id=f"s/{lang}.pdf", ocr=OcrConfig(enabled=True, dpi=200))
    assert sorted(doc.ocr_pages) == [1, 2, 3, 4, 5]
    ends = doc.page_offsets[1:] + [len(doc.markdown)]
    for lines, start, end in zip(truth, doc.page_offsets, ends):
        assert char_recall(lines, doc.markdown[start:end]) >= 0.85, (lines, doc.markdown[start:end])
    assert not any(COVERAGE_WARNING in w for w in doc.warnings), doc.warnings


def test_coverage_counts_the_ink_the_word_boxes_overlap():
    page = np.full((1500, 1200), 255, dtype=np.uint8)
    page[100:140, 100:700] = np.tile([0, 255, 255], 200)  # a "line of text": strokes, not a fill
    page[600:640, 100:700] = page[100:140, 100:700]
    assert ink_coverage(page, []) == 0.0
    assert ink_coverage(page, [(90, 95, 620, 50)]) == pytest.approx(0.5, abs=0.05)
    assert ink_coverage(page, [(90, 95, 620, 50), (90, 595, 620, 50)]) == 1.0
    assert ink_coverage(np.full((800, 600), 255, dtype=np.uint8), []) == 1.0  # a blank page
    solid = np.full((800, 600), 255, dtype=np.uint8)
    solid[100:500, 100:500] = 0  # a filled box (a photo's dark area): not text
    assert ink_coverage(solid, []) == 1.0


def test_the_warning_names_the_pages_under_the_threshold():
    assert coverage_warning({1: 0.95, 2: 0.9}) is None
    warning = coverage_warning({1: 0.95, 2: 0.21, 3: MIN_COVERAGE - 0.01})
    assert warning is not None and "2 page(s)" in warning
    assert "page 2 (21%)" in warning and "page 3 (59%)" in warning and "page 1" not in warning


@needs_tesseract
def test_the_segmentation_enters_the_ocr_key():
    assert OcrConfig(enabled=True).key().endswith("/300dpi/psm3+4+6")
    assert OcrConfig(enabled=True, psm=(4,)).key() != OcrConfig(enabled=True).key()
