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


# --- layouts (tests/bench/ocr_bench.py measures the page segmentation on these) -------------
# Each layout draws known lines at known places; the lines are the ground truth. Texts are
# written for these tests (no held-out data).
_EN = {
    "title": "Annual Report on Coastal Lighthouses",
    "body": ["The northern beacon was rebuilt in spring after the storm",
             "damaged its lantern room and the stairs to the gallery.",
             "Keepers now log the fog signal twice a day, at dawn and dusk,",
             "and the supply boat calls every second Thursday of the month.",
             "Visitors may climb the tower on weekends between May and June."],
    "left": ["Tide tables are posted at", "the harbour office early", "each Monday morning,",
             "with the times of high", "water for the week."],
    "right": ["Ferry tickets are sold", "on board or at the kiosk", "beside the fish market;",
              "children under twelve", "travel free of charge."],
    "table": [["Station", "Height", "Range"], ["Northcliff", "38 m", "22 nm"],
              ["Gull Point", "21 m", "15 nm"], ["Black Rock", "45 m", "27 nm"]],
    "sparse": ["Invoice 4471", "Delivered to the east pier", "Signed by the harbour master",
               "Paid in full"],
}
_ZH = {
    "title": "沿海灯塔年度报告",
    "body": ["北方灯塔在春季风暴之后重新修建完成",
             "风暴损坏了灯室和通往瞭望台的楼梯",
             "看守人现在每天早晚两次记录雾号情况",
             "补给船每个月的第二个星期四按时到港",
             "五月至六月的周末游客可以登上塔顶参观"],
    "left": ["潮汐时刻表每周一早上", "张贴在港口办公室门口", "并注明本周每天的高潮", "时间和预计的最高水位"],
    "right": ["渡轮船票可以在船上", "或鱼市旁边的售票亭", "购买十二岁以下儿童", "乘船一律免费不收费"],
    "table": [["站点", "高度", "射程"], ["北崖", "三十八米", "二十二海里"],
              ["鸥角", "二十一米", "十五海里"], ["黑岩", "四十五米", "二十七海里"]],
    "sparse": ["发票编号四四七一", "送达东码头仓库", "港务长签字确认", "全额付清"],
}
LAYOUT_TEXTS = {"eng": _EN, "chi": _ZH}
LAYOUTS = ("single column", "title + paragraphs", "two columns", "table", "sparse lines")
_FONT = {"eng": "helv", "chi": "china-s"}


def draw_layout(page, layout: str, lang: str) -> list[str]:
    """Draw ``layout`` in ``lang`` ("eng", "chi") on a pymupdf page; return its lines."""
    texts, font = LAYOUT_TEXTS[lang], _FONT[lang]
    lines: list[tuple[float, float, str, float]] = []  # x, y, text, size
    if layout == "single column":
        lines = [(72, 90 + 20 * i, t, 12) for i, t in enumerate(texts["body"])]
    elif layout == "title + paragraphs":
        lines = [(72, 90, texts["title"], 22)]
        lines += [(72, 140 + 18 * i + (14 if i >= 3 else 0), t, 11) for i, t in enumerate(texts["body"])]
    elif layout == "two columns":
        lines = [(72, 90 + 18 * i, t, 12) for i, t in enumerate(texts["left"])]
        lines += [(330, 90 + 18 * i, t, 12) for i, t in enumerate(texts["right"])]
    elif layout == "table":
        lines = [(72 + 160 * c, 90 + 24 * r, cell, 12)
                 for r, row in enumerate(texts["table"]) for c, cell in enumerate(row)]
    elif layout == "sparse lines":
        lines = [(72 + 90 * (i % 2), 110 + 170 * i, t, 13) for i, t in enumerate(texts["sparse"])]
    else:
        raise ValueError(f"unknown layout {layout!r}")
    for x, y, text, size in lines:
        page.insert_text((x, y), text, fontsize=size, fontname=font)
    return [text for _x, _y, text, _size in lines]


def layout_png(layout: str, lang: str, dpi: int = 300) -> tuple[bytes, list[str]]:
    """One scanned A4 page of ``layout`` as a grayscale PNG, and its lines."""
    src = pymupdf.open()
    page = src.new_page()
    lines = draw_layout(page, layout, lang)
    return page.get_pixmap(dpi=dpi, colorspace=pymupdf.csGRAY).tobytes("png"), lines


def char_recall(lines: list[str], text: str) -> float:
    """The share of the lines' characters (blanks aside) found in ``text``, each line aligned
    on its own (so a layout read in another column order loses nothing)."""
    import difflib

    found = "".join(text.split())
    total = matched = 0
    for line in lines:
        want = "".join(line.split())
        total += len(want)
        blocks = difflib.SequenceMatcher(None, want, found, autojunk=False).get_matching_blocks()
        matched += sum(b.size for b in blocks)
    return matched / total if total else 1.0


def ordered_recall(lines: list[str], text: str) -> float:
    """The share of the lines' characters found in ``text`` in the lines' order (a layout
    read across its columns, a line of one glued to the next of the other, scores low)."""
    import difflib

    want, found = "".join("".join(lines).split()), "".join(text.split())
    blocks = difflib.SequenceMatcher(None, want, found, autojunk=False).get_matching_blocks()
    return sum(b.size for b in blocks) / len(want) if want else 1.0



THREE_LINES = ["第一章 总则", "第二条 本法适用于全国", "第三条 国家保护公民"]
"""A title and two lines. Tesseract 5.3's automatic layout (psm 3, eng+chi_sim) reads none
of them whole from :func:`three_line_pdf`, at 200 dpi or at 300."""


def three_line_pdf(lines: list[str] = THREE_LINES, size: float = 16, dpi: int = 300) -> bytes:
    """A one-page scan (a bitmap at ``dpi``) of ``lines``, 4 x ``size`` apart, the first
    (the title) 4 pt larger."""
    src = pymupdf.open()
    page = src.new_page()
    for i, text in enumerate(lines):
        page.insert_text((72, 100 + i * size * 4), text, fontsize=size + (4 if i == 0 else 0),
                         fontname="china-s")
    pix = page.get_pixmap(dpi=dpi, colorspace=pymupdf.csGRAY)
    doc = pymupdf.open()
    scan = doc.new_page(width=page.rect.width, height=page.rect.height)
    scan.insert_image(scan.rect, stream=pix.tobytes("png"))
    return doc.tobytes()
