"""OCR of scanned PDF pages and images (kbsync.convert.ocr), on scans the tests make.

The recognition tests need Tesseract with English and simplified Chinese data (`.ci/run`
installs them); without it they skip and say why. The OCR-off tests never need it.
"""

from __future__ import annotations

import pymupdf
import pytest

from kbsync.convert import OcrConfig, convert, is_supported
from kbsync.convert.isolate import IsolatedConverter
from kbsync.convert.ocr import is_garbled
from kbsync.errors import NoTextLayer, UnsupportedFormat
from tests.scans import (
    CHINESE,
    CHINESE_WORDS,
    ENGLISH,
    ENGLISH_WORDS,
    TEXT_PAGE,
    add_scanned_page,
    add_text_page,
    add_unmapped_page,
    drop_unicode_maps,
    scan_pdf,
    scan_png,
    tesseract_missing,
)

OCR = OcrConfig(enabled=True, languages="eng+chi_sim", dpi=300, page_timeout_s=60)
needs_tesseract = pytest.mark.skipif(tesseract_missing() is not None,
                                     reason=tesseract_missing() or "")


def write(tmp_path, name: str, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def words_found(markdown: str, words: set[str]) -> set[str]:
    return {w for w in words if w in markdown}


@needs_tesseract
def test_english_and_chinese_scan_is_read_with_page_numbers_and_confidence(tmp_path):
    path = write(tmp_path, "scan.pdf", scan_pdf([[(ENGLISH, "helv")], [(CHINESE, "china-s")]]))
    doc = convert(path, doc_id="s/scan.pdf", ocr=OCR)
    assert words_found(doc.markdown, ENGLISH_WORDS) == ENGLISH_WORDS
    assert words_found(doc.markdown, CHINESE_WORDS) == CHINESE_WORDS
    assert sorted(doc.ocr_pages) == [1, 2] and doc.scanned_pages == 2
    assert all(80 <= c <= 100 for c in doc.ocr_pages.values()), doc.ocr_pages
    assert len(doc.page_offsets) == 2
    second = doc.markdown[doc.page_offsets[1]:]
    assert "北京大学" in second and "zebra" not in second  # each page's text on its own page


@needs_tesseract
def test_mixed_pdf_reads_only_the_scanned_pages(tmp_path):
    pdf = pymupdf.open()
    add_text_page(pdf)
    add_scanned_page(pdf, [(ENGLISH, "helv")])
    add_text_page(pdf, "Closing digital page on tidal clocks.")
    doc = convert(write(tmp_path, "mixed.pdf", pdf.tobytes()), doc_id="s/mixed.pdf", ocr=OCR)
    assert list(doc.ocr_pages) == [2] and doc.scanned_pages == 1
    pages = [doc.markdown[a:b] for a, b in zip(doc.page_offsets, doc.page_offsets[1:] + [None])]
    assert TEXT_PAGE.split(",")[0] in pages[0] and "tidal clocks" in pages[2]
    assert words_found(pages[1], ENGLISH_WORDS) == ENGLISH_WORDS
    assert doc.warnings == []


@needs_tesseract
def test_a_mojibake_text_layer_counts_as_missing(tmp_path):
    pdf = pymupdf.open()
    add_unmapped_page(pdf, ENGLISH)
    add_text_page(pdf)
    drop_unicode_maps(pdf)
    path = write(tmp_path, "moji.pdf", pdf.tobytes())
    raw = pymupdf.open(path)[0].get_text()
    assert "zebra" not in raw and raw.strip()  # the layer is there, but glyph ids
    doc = convert(path, doc_id="s/moji.pdf", ocr=OCR)
    assert list(doc.ocr_pages) == [1] and doc.scanned_pages == 1
    assert words_found(doc.markdown, ENGLISH_WORDS) == ENGLISH_WORDS
    off = convert(path, doc_id="s/moji.pdf")  # OCR off: the mojibake is not indexed either
    assert off.markdown.strip() == TEXT_PAGE and off.scanned_pages == 1
    assert "1 page(s) without a usable text layer: 1" in off.warnings[0]


def test_garble_test_on_characters():
    assert is_garbled("\ufffd" * 20 + " ok")
    assert is_garbled("\ue000\ue001\ue002 \ue003 ab")  # private-use glyph codes
    assert not is_garbled("普通的中文文本，没有问题。")
    assert not is_garbled("Plain English text with a stray \ufffd character.")
    assert not is_garbled("   \n ")


def test_with_ocr_off_a_scan_fails_with_how_to_turn_it_on(tmp_path):
    path = write(tmp_path, "scan.pdf", scan_pdf([[(ENGLISH, "helv")]]))
    with pytest.raises(NoTextLayer) as info:
        convert(path, doc_id="s/scan.pdf")
    message = str(info.value)
    assert "scan.pdf" in message and "KBSYNC_OCR=true" in message
    assert "apt-get install -y tesseract-ocr" in message and "\n" not in message


def test_images_are_supported_only_with_ocr(tmp_path):
    png = write(tmp_path, "note.png", scan_png([(ENGLISH, "helv")]))
    assert not is_supported(png) and is_supported(png, ocr=True)
    assert is_supported(tmp_path / "x.TIFF", ocr=True) and is_supported(tmp_path / "x.jpeg", ocr=True)
    with pytest.raises(UnsupportedFormat, match="KBSYNC_OCR=true"):
        convert(png, doc_id="s/note.png")


@needs_tesseract
def test_png_image_is_read(tmp_path):
    png = write(tmp_path, "note.png", scan_png([(ENGLISH, "helv"), (CHINESE, "china-s")]))
    doc = convert(png, doc_id="s/note.png", ocr=OCR)
    assert doc.source_type == "image" and list(doc.ocr_pages) == [1]
    assert words_found(doc.markdown, ENGLISH_WORDS | CHINESE_WORDS) == ENGLISH_WORDS | CHINESE_WORDS


@needs_tesseract
def test_each_page_has_its_own_time_limit_in_the_isolated_workers(tmp_path):
    """OCR runs in the isolated workers; a page past its own limit is dropped with a warning
    and the others count. The page limit lies inside the file's, which nothing extends
    (issue 37: tests/convert/test_ocr_limits.py)."""
    pdf = pymupdf.open()
    add_text_page(pdf)
    add_scanned_page(pdf, [(ENGLISH, "helv")])
    add_scanned_page(pdf, [(CHINESE, "china-s")])
    path = write(tmp_path, "long.pdf", pdf.tobytes())
    with IsolatedConverter(workers=1, timeout_s=120.0, memory_mb=None) as pool:
        doc = pool.convert(path, doc_id="s/long.pdf", ocr=OCR)
        assert sorted(doc.ocr_pages) == [2, 3]
        hurried = OcrConfig(enabled=True, page_timeout_s=0.01)
        quick = pool.convert(path, doc_id="s/long.pdf", ocr=hurried)
    assert quick.ocr_pages == {} and quick.scanned_pages == 2
    assert "lighthouse" in quick.markdown
    assert any("OCR failed on 2 page(s)" in w and "took over 0.01 s" in w for w in quick.warnings)


@needs_tesseract
def test_each_tiff_frame_is_a_page(tmp_path):
    image = pytest.importorskip("PIL.Image")
    import io

    english = image.open(io.BytesIO(scan_png([(ENGLISH, "helv")])))
    chinese = image.open(io.BytesIO(scan_png([(CHINESE, "china-s")])))
    english.save(tmp_path / "two.tiff", save_all=True, append_images=[chinese])
    doc = convert(tmp_path / "two.tiff", doc_id="s/two.tiff", ocr=OCR)
    assert sorted(doc.ocr_pages) == [1, 2] and len(doc.page_offsets) == 2
    assert words_found(doc.markdown[doc.page_offsets[1]:], CHINESE_WORDS) == CHINESE_WORDS
