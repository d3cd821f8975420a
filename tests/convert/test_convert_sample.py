"""Every file of data/sample converts: non-empty Markdown, the right title, type and pages."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from kbsync.convert import SUPPORTED_EXTENSIONS, convert, is_supported

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"

# relative path -> (source_type, converter, title, page count or None)
EXPECTED = {
    "billing/plans-and-invoices.xlsx": ("xlsx", "markitdown", "plans-and-invoices", None),
    "engineering/api-reference.html": ("html", "html-to-markdown", "Tessera REST API v2", None),
    "engineering/deployment.md": ("markdown", "text", "Deployment Guide", None),
    "engineering/scripts/rotate_api_keys.py": ("code", "text", "rotate_api_keys", None),
    "engineering/service-catalog.json": ("json", "text", "service-catalog", None),
    "handbook/onboarding.md": ("markdown", "text", "Engineering Onboarding Handbook", None),
    "incidents/2024-03-12-ingestion-outage.docx": (
        "docx", "markitdown", "Postmortem: Ingestion API outage on 12 March 2024", None),
    "policies/security-policy.pdf": ("pdf", "pymupdf", "Tessera Information Security Policy", 5),
    "product/release-notes.txt": ("text", "text", "Tessera release notes", None),
    "product/roadmap-2024.pptx": ("pptx", "markitdown", "Tessera Product Roadmap 2024", 6),
    "support/tickets-2024-q1.csv": ("csv", "markitdown", "tickets-2024-q1", None),
    "zh/faq.md": ("markdown", "text", "Tessera 常见问题（FAQ）", None),
    "zh/ops-runbook.txt": ("text", "text", "ops-runbook", None),
}


def test_expected_covers_the_whole_sample() -> None:
    files = {p.relative_to(SAMPLE).as_posix() for p in SAMPLE.rglob("*") if p.is_file()}
    assert files == set(EXPECTED)


@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_sample_file_converts(rel: str) -> None:
    source_type, converter, title, pages = EXPECTED[rel]
    path = SAMPLE / rel
    assert is_supported(path)
    doc = convert(path, doc_id=f"sample/{rel}")
    assert doc.doc_id == f"sample/{rel}"
    assert doc.path == str(path)
    assert doc.markdown.strip()
    assert (doc.source_type, doc.converter, doc.title) == (source_type, converter, title)
    assert doc.page_count == pages
    assert doc.warnings == []
    offsets = doc.page_offsets
    assert all(a < b for a, b in zip(offsets, offsets[1:]))
    assert all(0 <= o < len(doc.markdown) for o in offsets)


def test_pdf_headings_pages_and_table() -> None:
    doc = convert(SAMPLE / "policies/security-policy.pdf", doc_id="p")
    md = doc.markdown
    assert md.startswith("# Tessera Information Security Policy\n")
    headings = re.findall(r"(?m)^(#+) (.+)$", md)
    assert ("##", "1. Access Control") in headings
    assert ("###", "2.1 Data Retention") in headings
    assert ("##", "6. Vendor Management") in headings
    # page 2 starts with section 2, and the ruled table is a Markdown table on that page
    page2 = md[doc.page_offsets[1]:doc.page_offsets[2]]
    assert page2.startswith("## 2. Data Protection")
    assert "| Raw events (Team plan) | 400 days | Nightly partition drop |" in page2
    # the running footer ("... v3.2 - page N") is dropped from every page
    assert "- page" not in md


def test_pptx_slides_are_pages() -> None:
    doc = convert(SAMPLE / "product/roadmap-2024.pptx", doc_id="r")
    slides = [doc.markdown[a:b] for a, b in zip(doc.page_offsets, doc.page_offsets[1:] + [None])]
    assert slides[2].startswith("# Q1: Faster dashboards")
    assert "Slide number" not in doc.markdown
    assert "| Q4 | Frankfurt region live | Platform team |" in slides[5]
    assert "exit survey (n=96)" in slides[1]  # speaker notes are kept with their slide


def test_xlsx_sections_and_repeated_header() -> None:
    md = convert(SAMPLE / "billing/plans-and-invoices.xlsx", doc_id="x").markdown
    assert re.findall(r"(?m)^## (.+)$", md) == ["Plans", "Invoices 2024-Q1", "价格说明"]
    header = "| Invoice | Customer | Plan | Issued | Amount (USD) | Status |"
    assert md.count(header) >= 2  # the long sheet is cut into blocks that repeat the header
    assert "NaN" not in md


def test_html_drops_boilerplate() -> None:
    md = convert(SAMPLE / "engineering/api-reference.html", doc_id="h").markdown
    for noise in ("Sign in", "Cookie settings", "Changelog", "window.analytics", "Privacy"):
        assert noise not in md
    assert "600 requests per minute" in md
    assert "| 429 | rate_limited |" in md  # no markdownify escapes (rate\\_limited)


def test_docx_table_header_promoted() -> None:
    md = convert(SAMPLE / "incidents/2024-03-12-ingestion-outage.docx", doc_id="d").markdown
    assert "| Time (UTC) | Event |\n| --- | --- |\n| 14:05 |" in md


def test_code_and_json_are_fenced() -> None:
    code = convert(SAMPLE / "engineering/scripts/rotate_api_keys.py", doc_id="c").markdown
    assert code.startswith("```python\n") and code.endswith("\n```")
    js = convert(SAMPLE / "engineering/service-catalog.json", doc_id="j").markdown
    assert js.startswith("```json\n") and '"name": "billing-service"' in js


def test_chinese_documents() -> None:
    faq = convert(SAMPLE / "zh/faq.md", doc_id="f").markdown
    assert "### 中途升级套餐如何计费？" in faq
    runbook = convert(SAMPLE / "zh/ops-runbook.txt", doc_id="r").markdown  # stored as GBK
    assert "每五分钟归档一次 WAL 日志" in runbook


def test_is_supported() -> None:
    assert is_supported(Path("a/B.PDF")) and is_supported(Path("x.Docx"))
    assert not is_supported(Path("image.png")) and not is_supported(Path("Makefile"))
    assert not is_supported(Path(".env")) and not is_supported(Path("id_rsa.pem"))
    assert all(e == e.lower() and e.startswith(".") for e in SUPPORTED_EXTENSIONS)


def test_threads_share_the_converters() -> None:
    """markitdown converters are created once and shared: concurrent results equal serial ones."""
    rels = [r for r in sorted(EXPECTED) if r.endswith((".docx", ".xlsx", ".pptx", ".html", ".csv"))]
    serial = {r: convert(SAMPLE / r, doc_id=r).markdown for r in rels}
    results: dict[str, str] = {}
    errors: list[BaseException] = []

    def work(rel: str) -> None:
        try:
            results[rel] = convert(SAMPLE / rel, doc_id=rel).markdown
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(r,)) for r in rels]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and results == serial
