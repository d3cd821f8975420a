"""PDF layout recovery: headings from font size and weight, running lines, tables, CJK joins."""

from __future__ import annotations

import re

import pymupdf

from kbsync.convert import convert


def _page(doc: pymupdf.Document, items: list[tuple[float, str, float, str]], footer: str | None) -> None:
    page = doc.new_page()
    for y, text, size, font in items:
        page.insert_text((60, y), text, fontsize=size, fontname=font)
    if footer:
        page.insert_text((60, 820), footer, fontsize=8)


def test_structure_is_recovered(write) -> None:
    doc = pymupdf.open()
    body = "helv"
    for n in range(1, 4):
        _page(doc, [
            (70, f"Part {n}", 22, "hebo"),
            (110, "An introduction set in a larger font that runs over several lines,", 13, body),
            (126, "which makes it a paragraph in a big font and certainly not a heading", 13, body),
            (142, "even though every one of its lines is larger than the body text", 13, body),
            (158, "that follows it, as magazines and reports often do on purpose.", 13, body),
            (200, "Background", 15, "hebo"),
            (225, "Body text line one of the section.", 10, body),
            (238, "Body text line two of the section.", 10, body),
            (270, "Bold run-in title", 10, "hebo"),
            (290, "# 1 is what the ticket said, a line that starts like a heading.", 10, body),
            *[(320 + 13 * k, f"More body text, line {k}, so that the body size dominates.", 10, body)
              for k in range(12)],
        ], footer=f"Confidential - page {n} of 3")
    md = convert(write("r.pdf", doc.tobytes()), doc_id="t").markdown
    headings = re.findall(r"(?m)^#+ .*$", md)
    assert headings[:3] == ["# Part 1", "## Background", "### Bold run-in title"]
    assert "An introduction set in a larger font" in md and "# An introduction" not in md
    assert "\\# 1 is what the ticket said" in md
    assert "Body text line one of the section. Body text line two of the section." in md
    assert "Confidential" not in md  # a running footer on every page


def test_chinese_lines_join_without_spaces(write) -> None:
    doc = pymupdf.open()
    page = doc.new_page()
    page.insert_text((60, 80), ["数据库每天凌晨两点做一次全量", "快照，保留三十五天。"], fontsize=11, fontname="china-s")
    md = convert(write("zh.pdf", doc.tobytes()), doc_id="t").markdown
    assert "数据库每天凌晨两点做一次全量快照，保留三十五天。" in md


def test_table_rows_become_markdown(write) -> None:
    doc = pymupdf.open()
    page = doc.new_page()
    page.insert_text((60, 60), "Quarterly numbers follow.", fontsize=10)
    rows = [["Quarter", "Revenue"], ["Q1", "1.2 M"], ["Q2", "1.5 M"]]
    for r, row in enumerate(rows):
        for c, cell in enumerate(row):
            rect = pymupdf.Rect(60 + 120 * c, 80 + 20 * r, 180 + 120 * c, 100 + 20 * r)
            page.draw_rect(rect, width=0.6)
            page.insert_text((rect.x0 + 4, rect.y0 + 14), cell, fontsize=9)
    md = convert(write("t.pdf", doc.tobytes()), doc_id="t").markdown
    assert md == ("Quarterly numbers follow.\n\n| Quarter | Revenue |\n| --- | --- |\n"
                  "| Q1 | 1.2 M |\n| Q2 | 1.5 M |")
