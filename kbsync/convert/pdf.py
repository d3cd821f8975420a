"""PDF to Markdown with pymupdf, page by page; pypdf as the fallback.

Headings are recovered from the layout: the body font size is the character-weighted
most common size of the document; lines clearly larger (``>= 1.15 x body``) become ``#`` to
``###`` by size rank, and short bold-only lines at body size one level below those. Running
headers and footers (the same line, digits ignored, in the top or bottom 8% of most pages)
are dropped. Tables are kept as Markdown tables where ``page.find_tables()`` finds them;
because that call costs ~0.15 s per page here (~10 ms when clipped to the ruled area), it
only runs on pages whose vector drawings look like a grid, clipped to that area.

Pages without a usable text layer (images and no text, or mojibake: see
:func:`kbsync.convert.ocr.is_garbled`) are read by OCR when it is on (:mod:`.ocr`); with it
off, a PDF of only such pages raises ``NoTextLayer``, whose message says how to turn OCR on.
Limits: no multi-column reading-order repair beyond pymupdf's block order.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass

from kbsync.convert.ocr import (ENABLE_HINT, NO_OCR, OcrConfig, is_garbled, read_scanned_pages,
                                scan_message)
from kbsync.convert.pdf_fallback import convert_pypdf, pypdf_notes
from kbsync.convert.text import Extracted, join_pages, normalize_newlines
from kbsync.errors import (CorruptDocument, EmptyDocument, EncryptedDocument, FileTooLarge,
                           NoTextLayer)
from kbsync.text.cjk import no_space_between

logger = logging.getLogger(__name__)

_HEADING_RATIO = 1.15
_MAX_HEADING_CHARS = 150
_MAX_BOLD_HEADING_CHARS = 80
_MARGIN_FRACTION = 0.08
_MAX_TABLE_PAGES = 300  # a deterministic bound on table detection cost per document
_DIGITS = re.compile(r"\d+")
_ATX_START = re.compile(r"#{1,6}(\s|$)")


class _PymupdfFailed(Exception):
    """pymupdf could not make sense of the file; try pypdf."""


@dataclass
class _Line:
    text: str
    size: float
    bold: bool
    bbox: tuple[float, float, float, float]
    block: int


def convert_pdf(data: bytes, *, name: str, ocr: OcrConfig = NO_OCR) -> Extracted:
    """Convert PDF bytes; pymupdf first, pypdf if pymupdf cannot open or read the file.

    Raises:
        EncryptedDocument: a user password is needed.
        NoTextLayer: no page has a usable text layer (a scan), and OCR is off or found
            nothing.
        EmptyDocument: pages hold neither text nor images.
        CorruptDocument: neither library can read the file.
        FileTooLarge: more scanned pages than ``ocr.max_pages`` (OCR on).
    """
    try:
        return _convert_pymupdf(data, name, ocr)
    except (EncryptedDocument, NoTextLayer, EmptyDocument, CorruptDocument, FileTooLarge,
            MemoryError):
        raise
    except Exception as exc:  # any pymupdf failure: the fallback decides
        first = exc
    logger.info("%s: pymupdf failed (%s), trying pypdf", name, _short(first))
    with pypdf_notes() as noted:
        try:
            result = convert_pypdf(data, name)
        except (EncryptedDocument, EmptyDocument, MemoryError):
            raise
        except Exception as exc:
            said = f"; pypdf noted: {'; '.join(noted)[:160]}" if noted else ""
            raise CorruptDocument(f"{name}: not a readable PDF (pymupdf: {_short(first)}; "
                                  f"pypdf: {_short(exc)}{said})") from exc
    result.warnings.insert(0, f"pymupdf failed ({_short(first)}); text extracted with pypdf")
    result.warnings[1:1] = [f"pypdf: {line}" for line in noted[:5]]
    return result


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:160]


# --- pymupdf ------------------------------------------------------------------------
def _open(data: bytes, name: str):
    import pymupdf

    pymupdf.TOOLS.mupdf_display_errors(False)  # broken files are reported by us, once
    try:
        doc = pymupdf.open(stream=data, filetype="pdf")
    except Exception as exc:
        raise _PymupdfFailed(str(exc)) from exc
    if doc.needs_pass and not doc.authenticate(""):
        doc.close()
        raise EncryptedDocument(f"{name}: PDF is encrypted with a user password")
    if doc.page_count == 0:
        doc.close()
        raise _PymupdfFailed("no pages")
    return doc


def _convert_pymupdf(data: bytes, name: str, ocr: OcrConfig) -> Extracted:
    import pymupdf

    doc = _open(data, name)
    warnings: list[str] = []
    try:
        if doc.is_repaired:
            warnings.append("PDF was damaged and repaired by pymupdf; text may be incomplete")
        flags = pymupdf.TEXTFLAGS_TEXT  # TEXTFLAGS_DICT without image data: much cheaper
        pages_lines: list[list[_Line]] = []
        heights: list[float] = []
        for page in doc:
            pages_lines.append(_page_lines(page.get_text("dict", flags=flags)))
            heights.append(page.rect.height)
        body = _body_size(pages_lines)
        _drop_running_lines(pages_lines, heights, body)
        levels = _heading_levels(pages_lines, body)
        pages: list[str] = []
        table_pages = 0
        image_only: list[int] = []
        garbled: list[int] = []
        for index, page in enumerate(doc):
            tables = []
            if table_pages < _MAX_TABLE_PAGES:
                clip = _grid_area(page)
                if clip is not None:
                    table_pages += 1
                    tables = _find_tables(page, clip, pages_lines[index])
            text = _render_page(pages_lines[index], body, levels, tables)
            # get_image_info() also sees inline images, which scanners often write
            if not text.strip() and page.get_image_info():
                image_only.append(index + 1)
            elif text.strip() and is_garbled(text, page):  # mojibake is no text layer: never index it
                garbled.append(index + 1)
                text = ""
            pages.append(text)
        ocr_pages = read_scanned_pages(doc, pages, sorted(image_only + garbled), ocr,
                                       name=name, warnings=warnings)
    finally:
        doc.close()
    scanned = len(image_only) + len(garbled)
    if not any(p.strip() for p in pages):
        if scanned:
            raise NoTextLayer(scan_message(name, len(pages), ocr))
        if warnings:  # repaired and nothing recovered: damaged, not empty
            raise CorruptDocument(f"{name}: damaged PDF, no text could be recovered")
        raise EmptyDocument(f"{name}: PDF has {len(pages)} page(s) and no text")
    unread = [n for n in image_only + garbled if n not in ocr_pages]
    if unread:
        warnings.append(f"{len(unread)} page(s) without a usable text layer: {_page_list(sorted(unread))}"
                        + ("" if ocr.enabled else f" ({ENABLE_HINT})"))
    markdown, offsets = join_pages(pages)
    unknown = markdown.count("\ufffd")
    if unknown > 0.1 * len(markdown.replace(" ", "")):
        warnings.append(f"{unknown} characters without a Unicode mapping (fonts lack ToUnicode)")
    return Extracted(markdown, "pymupdf", "pdf", offsets, warnings, ocr_pages=ocr_pages,
                     scanned_pages=scanned)


def _page_list(numbers: list[int]) -> str:
    shown = ", ".join(map(str, numbers[:10]))
    return shown + (", ..." if len(numbers) > 10 else "")


def _page_lines(page_dict: dict) -> list[_Line]:
    lines: list[_Line] = []
    for block_no, block in enumerate(page_dict.get("blocks", ())):
        for line in block.get("lines", ()):
            spans = [s for s in line["spans"] if s["text"]]
            text = normalize_newlines("".join(s["text"] for s in spans)).strip()
            if not text:
                continue
            weight: Counter[float] = Counter()
            bold = True
            for s in spans:
                visible = len(s["text"].strip())
                weight[round(s["size"] * 2) / 2] += visible
                # flags bit 4 is bold; some producers only say so in the font name
                if visible and not (s["flags"] & 16 or "bold" in s["font"].lower()):
                    bold = False
            size = weight.most_common(1)[0][0] if weight else 0.0
            lines.append(_Line(text, size, bold, tuple(line["bbox"]), block_no))
    return lines


def _drop_running_lines(pages_lines: list[list[_Line]], heights: list[float], body: float) -> None:
    """Remove page headers/footers: the same margin line (digits ignored) on most pages.

    Only lines no larger than the body text count: a "Chapter N" heading at the top of
    every page is content, a small running title is not.
    """
    if len(pages_lines) < 3:
        return
    seen: Counter[str] = Counter()
    for lines, height in zip(pages_lines, heights):
        keys = {_DIGITS.sub("#", ln.text) for ln in lines if _running_candidate(ln, height, body)}
        seen.update(keys)
    threshold = max(3, len(pages_lines) // 2)
    running = {key for key, count in seen.items() if count >= threshold}
    if not running:
        return
    for i, (lines, height) in enumerate(zip(pages_lines, heights)):
        pages_lines[i] = [
            ln for ln in lines
            if not (_running_candidate(ln, height, body) and _DIGITS.sub("#", ln.text) in running)
        ]


def _running_candidate(line: _Line, height: float, body: float) -> bool:
    margin = height * _MARGIN_FRACTION
    in_margin = line.bbox[3] <= margin or line.bbox[1] >= height - margin
    return in_margin and line.size <= body


def _body_size(pages_lines: list[list[_Line]]) -> float:
    """The character-weighted most common font size (ties: the smaller size)."""
    weight: Counter[float] = Counter()
    for lines in pages_lines:
        for ln in lines:
            weight[ln.size] += len(ln.text)
    if not weight:
        return 0.0
    return max(weight, key=lambda size: (weight[size], -size))


def _heading_levels(pages_lines: list[list[_Line]], body: float) -> dict[float, int]:
    """A heading level (1-3, by size rank) for each size clearly larger than the body.

    Only sizes seen in short blocks (at most 3 lines) count: a paragraph set large is
    no heading and must not push the real headings a level down.
    """
    sizes: set[float] = set()
    for lines in pages_lines:
        per_block = Counter(ln.block for ln in lines)
        sizes.update(ln.size for ln in lines if per_block[ln.block] <= 3)
    larger = sorted((s for s in sizes if s >= body * _HEADING_RATIO), reverse=True)
    return {size: min(rank + 1, 3) for rank, size in enumerate(larger)}


def _heading_level(line: _Line, body: float, levels: dict[float, int]) -> int:
    if line.size in levels and len(line.text) <= _MAX_HEADING_CHARS:
        return levels[line.size]
    if (line.bold and line.size >= body and len(line.text) <= _MAX_BOLD_HEADING_CHARS
            and not line.text.endswith((".", ",", ";", ":")) and any(c.isalpha() for c in line.text)):
        return min(max(levels.values(), default=0) + 1, 4)
    return 0


def _join_lines(texts: list[str]) -> str:
    out = ""
    for text in texts:
        if not out:
            out = text
        elif no_space_between(out, text):
            out += text  # CJK has no spaces between words, nor at line ends
        elif out.endswith("-") and out[-2:-1].isalpha() and text[:1].islower():
            out += text
        else:
            out += " " + text
    return out


def _render_page(lines: list[_Line], body: float, levels: dict[float, int],
                 tables: list[tuple[tuple[float, float, float, float], str]]) -> str:
    parts: list[str] = []
    para: list[str] = []
    heading: list[str] = []
    heading_level = 0
    prev: _Line | None = None
    emitted: set[int] = set()

    def flush() -> None:
        if heading:
            title = _join_lines(heading)
            if len(heading) <= 3 and len(title) <= _MAX_HEADING_CHARS:
                parts.append("#" * heading_level + " " + title)
            else:  # a whole paragraph set large (an intro, a pull quote) is no heading
                para[:0] = heading
            heading.clear()
        if para:
            text = _join_lines(para)
            # body text that happens to start like "# x" must not become a heading
            parts.append("\\" + text if _ATX_START.match(text) else text)
            para.clear()

    for ln in lines:
        table_index = _inside_table(ln, tables)
        if table_index is not None:
            if table_index not in emitted:
                flush()
                emitted.add(table_index)
                parts.append(tables[table_index][1])
            prev = None
            continue
        level = _heading_level(ln, body, levels)
        new_block = prev is None or ln.block != prev.block or _gap(prev, ln)
        if level:
            if not heading or level != heading_level or new_block:
                flush()
            heading_level = level
            heading.append(ln.text)
        else:
            if heading or new_block:
                flush()
            para.append(ln.text)
        prev = ln
    flush()
    for index, (_bbox, table_md) in enumerate(tables):
        if index not in emitted:  # a table whose text we did not see in the text layer
            parts.append(table_md)
    return "\n\n".join(parts)


def _gap(prev: _Line, line: _Line) -> bool:
    """A vertical gap larger than one line height starts a new paragraph."""
    height = max(prev.bbox[3] - prev.bbox[1], 1.0)
    return line.bbox[1] - prev.bbox[3] > height * 0.9


def _inside_table(line: _Line, tables: list) -> int | None:
    cx = (line.bbox[0] + line.bbox[2]) / 2
    cy = (line.bbox[1] + line.bbox[3]) / 2
    for index, (bbox, _md) in enumerate(tables):
        if bbox[0] <= cx <= bbox[2] and bbox[1] <= cy <= bbox[3]:
            return index
    return None


def _grid_area(page):
    """The bounding box of ruling lines if the page's drawings look like a table grid."""
    import pymupdf

    horizontal = vertical = 0
    area = None
    for path in page.get_cdrawings():
        for item in path["items"]:
            if item[0] == "re":
                rect = pymupdf.Rect(item[1])
                horizontal += 2
                vertical += 2
            elif item[0] == "l":
                (x0, y0), (x1, y1) = item[1], item[2]
                if abs(y0 - y1) < 1:
                    horizontal += 1
                elif abs(x0 - x1) < 1:
                    vertical += 1
                else:
                    continue
                rect = pymupdf.Rect(min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1))
            else:
                continue
            area = rect if area is None else area | rect
    if horizontal < 3 or vertical < 2 or area is None:
        return None
    return area + (-3, -3, 3, 3)


def _find_tables(page, clip, lines: list[_Line]) -> list[tuple[tuple[float, float, float, float], str]]:
    try:
        found = page.find_tables(clip=clip, use_layout=False).tables
    except Exception as exc:  # table detection is an extra: never fail the page for it
        logger.debug("find_tables failed on page %s: %s", page.number + 1, exc)
        return []
    tables = []
    for table in found:
        rows = _table_rows(table, lines)
        if len(rows) >= 2 and len(rows[0]) >= 2:
            x0, y0, x1, y1 = table.bbox
            tables.append(((x0, y0, x1, y1), _markdown_table(rows)))
    return tables


def _table_rows(table, lines: list[_Line]) -> list[list[str]]:
    """Cell text from our own text lines: pymupdf's cell text drops narrow spaces."""
    rows = []
    for row in table.rows:
        cells = []
        for cell in row.cells:
            if cell is None:
                cells.append("")
                continue
            x0, y0, x1, y1 = cell
            texts = [
                ln.text for ln in lines
                if x0 <= (ln.bbox[0] + ln.bbox[2]) / 2 <= x1 and y0 <= (ln.bbox[1] + ln.bbox[3]) / 2 <= y1
            ]
            cells.append(_join_lines(texts))
        if any(cells):
            rows.append(cells)
    return rows


def _markdown_table(rows: list[list[str]]) -> str:
    width = max(len(r) for r in rows)

    def fmt(row: list[str]) -> str:
        cells = [c.replace("|", "\\|") for c in row] + [""] * (width - len(row))
        return "| " + " | ".join(cells) + " |"

    return "\n".join([fmt(rows[0]), "| " + " | ".join(["---"] * width) + " |"] + [fmt(r) for r in rows[1:]])
