"""Scanned documents made by the tests: known text rendered to images, no text layer.

Each page is drawn with pymupdf (Helvetica for Latin, the built-in ``china-s`` font for
Chinese), rendered to a grayscale bitmap and placed as an image on a new page, as a
scanner would. ``unmapped_pdf`` draws text with a font whose Unicode map is removed: its
text layer is mojibake (glyph ids as letters), while the page still shows the text.
"""

from __future__ import annotations

import shutil
import subprocess

import pymupdf

ENGLISH = ("Quarterly zebra inventory: forty turbines near Oslo harbour need gearbox "
           "bearings replaced before winter.")
ENGLISH_WORDS = {"zebra", "turbines", "Oslo", "harbour", "gearbox", "bearings", "winter"}
CHINESE = "扫描文件的光学字符识别测试，北京大学图书馆收藏古籍善本。"
CHINESE_WORDS = {"扫描", "光学", "字符", "识别", "北京大学", "图书馆"}
TEXT_PAGE = "A digital page about lighthouse keepers, with a real text layer."


def tesseract_missing() -> str | None:
    """Why the OCR tests cannot run here, or ``None``."""
    if shutil.which("tesseract") is None:
        return ("tesseract is not installed (apt-get install -y tesseract-ocr "
                "tesseract-ocr-eng tesseract-ocr-chi-sim)")
    out = subprocess.run(["tesseract", "--list-langs"], capture_output=True, text=True,
                         check=False).stdout.split()
    missing = {"eng", "chi_sim"} - set(out)
    return f"tesseract has no data for {', '.join(sorted(missing))}" if missing else None


def _draw(page, texts: list[tuple[str, str]]) -> None:
    y = 72
    for text, font in texts:
        page.insert_textbox(pymupdf.Rect(72, y, 540, y + 150), text, fontsize=14, fontname=font)
        y += 160


def add_scanned_page(doc, texts: list[tuple[str, str]], dpi: int = 200) -> None:
    """Append a page holding ``texts`` as a bitmap only."""
    src = pymupdf.open()
    _draw(src.new_page(), texts)
    pix = src[0].get_pixmap(dpi=dpi, colorspace=pymupdf.csGRAY)
    page = doc.new_page(width=src[0].rect.width, height=src[0].rect.height)
    page.insert_image(page.rect, stream=pix.tobytes("png"))


def add_text_page(doc, text: str = TEXT_PAGE) -> None:
    """Append a page with a real text layer."""
    _draw(doc.new_page(), [(text, "helv")])


def scan_pdf(pages: list[list[tuple[str, str]]]) -> bytes:
    """A PDF of scanned pages only."""
    doc = pymupdf.open()
    for texts in pages:
        add_scanned_page(doc, texts)
    return doc.tobytes()


def scan_png(texts: list[tuple[str, str]], dpi: int = 200) -> bytes:
    """One scanned page as a PNG file."""
    src = pymupdf.open()
    _draw(src.new_page(), texts)
    return src[0].get_pixmap(dpi=dpi, colorspace=pymupdf.csGRAY).tobytes("png")


def add_unmapped_page(doc, text: str) -> None:
    """Append a page whose text is drawn with a composite font without ToUnicode."""
    page = doc.new_page()
    page.insert_font(fontname="F9", fontbuffer=pymupdf.Font("cjk").buffer)
    page.insert_textbox(pymupdf.Rect(72, 72, 540, 300), text, fontsize=14, fontname="F9")


def drop_unicode_maps(doc) -> None:
    """Remove the ToUnicode map of every composite font (call before ``tobytes``)."""
    for xref in range(1, doc.xref_length()):
        if (doc.xref_get_key(xref, "Subtype")[1] == "/Type0"
                and doc.xref_get_key(xref, "ToUnicode")[0] != "null"):
            doc.xref_set_key(xref, "ToUnicode", "null")
