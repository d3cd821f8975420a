"""Conversion benchmark (not run in CI).

    .venv/bin/python tests/bench/convert_bench.py [--pages 200] [--seconds 2] [--markitdown-pdf]
        [--html-shares octave-html:60,handbook-zh-html:60,...] [--html-only]

Prints, on one CPU core (the process pins itself to one):
* pages/s for text PDFs: kbsync (pymupdf with headings, running-line removal and tables)
  vs pymupdf's plain ``page.get_text()``; optionally markitdown's PDF path for contrast;
* files/s per format on the sample files of ``data/sample`` (converters warm);
* the cold import cost of markitdown;
* the per-file cost of process isolation (``kbsync.convert.isolate``), when present;
* HTML on real shares (Debian documentation, see tests/realshares.py; never the held-out
  packages): files/s of markitdown's HtmlConverter (kbsync's HTML path until
  CONVERTER_VERSION 2, kept here as :func:`markitdown_html`) beside html-to-markdown
  (:func:`kbsync.convert.html.convert_html`), on the same pages in one run, with how many
  words of one output are missing from the other.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import pymupdf  # noqa: E402

from kbsync.convert import convert  # noqa: E402
from kbsync.convert.html import convert_html  # noqa: E402
from kbsync.convert.office import clean_images, tidy_tables  # noqa: E402
from kbsync.convert.pdf import convert_pdf  # noqa: E402
from kbsync.convert.text import normalize_newlines  # noqa: E402

SAMPLE = REPO / "data" / "sample"
WORDS = ("the deployment pipeline promotes each release candidate to staging before a canary "
         "receives five percent of production traffic while invoices are prorated to the day "
         "and security reviews cover every vendor that processes customer data").split()


def text_pdf(pages: int) -> bytes:
    """A report-like PDF: three heading sizes, wrapped paragraphs, a ruled table every 10 pages."""
    src = pymupdf.open()
    for i in range(10):
        page = src.new_page()
        y = 60.0
        page.insert_text((60, y + 14), f"Chapter {i + 1}", fontsize=20, fontname="hebo")
        y += 40
        for s in range(3):
            page.insert_text((60, y + 12), f"{i + 1}.{s + 1} Section title", fontsize=14, fontname="hebo")
            y += 24
            text = " ".join(WORDS[(k * 7 + i + s) % len(WORDS)] for k in range(110))
            rect = pymupdf.Rect(60, y, 535, y + 170)
            y = rect.y1 - page.insert_textbox(rect, text, fontsize=10.5) + 10
        if i == 0:
            for r in range(5):
                for c in range(3):
                    cell = pymupdf.Rect(60 + 150 * c, y + 18 * r, 210 + 150 * c, y + 18 * (r + 1))
                    page.draw_rect(cell, width=0.6)
                    page.insert_text((cell.x0 + 3, cell.y0 + 13), f"row {r} col {c}", fontsize=9)
        page.insert_text((60, 815), f"Tessera handbook - page {i + 1}", fontsize=8)
    doc = pymupdf.open()
    while doc.page_count < pages:
        doc.insert_pdf(src, to_page=min(9, pages - doc.page_count - 1))
    return doc.tobytes(garbage=1, deflate=True)


def rate(fn, min_seconds: float) -> tuple[float, float]:
    """Calls per second of fn() over at least min_seconds (after one warm-up call).

    Returns (per wall-clock second, per CPU second of this process): on a busy machine
    the CPU figure is the one that says what one free core would do.
    """
    fn()
    n, started, cpu = 0, time.perf_counter(), time.process_time()
    while True:
        fn()
        n += 1
        elapsed = time.perf_counter() - started
        if elapsed >= min_seconds and n >= 3:
            return n / elapsed, n / max(time.process_time() - cpu, 1e-9)


def bench_pdf(pages: int, seconds: float, with_markitdown: bool) -> None:
    data = text_pdf(pages)
    print(f"\n## Text PDF, {pages} pages ({len(data) / 1024:.0f} KiB)")

    def plain() -> None:
        with pymupdf.open(stream=data, filetype="pdf") as doc:
            for page in doc:
                page.get_text()

    for label, fn in (("pymupdf get_text() (plain)", plain),
                      ("kbsync convert_pdf (headings+tables)", lambda: convert_pdf(data, name="bench.pdf"))):
        wall, cpu = rate(fn, seconds)
        print(f"{label:40s} {wall * pages:8.0f} pages/s wall  {cpu * pages:8.0f} pages/CPU-s")
    if with_markitdown:
        from markitdown import MarkItDown, StreamInfo
        import io

        small = text_pdf(20)
        md = MarkItDown()
        wall, cpu = rate(lambda: md.convert_stream(io.BytesIO(small), stream_info=StreamInfo(extension=".pdf")),
                         seconds)
        print(f"{'markitdown PDF (pdfminer), 20 pages':40s} {wall * 20:8.1f} pages/s wall  {cpu * 20:8.1f} pages/CPU-s")


def bench_formats(seconds: float) -> None:
    print("\n## Files/s per format (sample files, converters warm)")
    for path in sorted(p for p in SAMPLE.rglob("*") if p.is_file()):
        wall, cpu = rate(lambda: convert(path, doc_id="b"), seconds)
        rel = path.relative_to(SAMPLE).as_posix()
        print(f"{path.suffix:6s} {rel:45s} {path.stat().st_size / 1024:6.1f} KiB "
              f"{wall:8.1f} files/s wall {cpu:8.1f} files/CPU-s")


def bench_import() -> None:
    code = "import time; t=time.perf_counter(); import markitdown.converters; print(time.perf_counter()-t)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    print(f"\n## Cold import of markitdown: {float(out.stdout):.2f} s")


def bench_isolation(seconds: float) -> None:
    try:
        from kbsync.convert.isolate import IsolatedConverter
    except ImportError:
        print("\n## Isolation: kbsync.convert.isolate not present")
        return
    print("\n## Process isolation (one worker)")
    started = time.perf_counter()
    with IsolatedConverter(workers=1) as pool:
        print(f"worker start (incl. markitdown import): {time.perf_counter() - started:.2f} s")
        for rel in ("engineering/deployment.md", "incidents/2024-03-12-ingestion-outage.docx"):
            path = SAMPLE / rel
            direct, _ = rate(lambda: convert(path, doc_id="b"), seconds)
            isolated, _ = rate(lambda: pool.convert(path, doc_id="b"), seconds)  # wall: work is in the worker
            overhead_ms = (1 / isolated - 1 / direct) * 1000
            print(f"{rel:45s} direct {direct:7.1f}/s  isolated {isolated:7.1f}/s  "
                  f"overhead {overhead_ms:5.2f} ms/file")


_BOILERPLATE_TAGS = ("script", "style", "noscript", "template", "nav", "footer", "aside",
                     "iframe", "svg", "button")
_BOILERPLATE_ROLES = {"navigation", "banner", "contentinfo", "search", "complementary"}
_BOILERPLATE_NAMES = {"cookie-banner", "cookies", "cookie-consent", "breadcrumb", "breadcrumbs",
                      "sidebar", "site-header", "site-footer", "skip-link", "toc"}
_markitdown_html_converter = None


def markitdown_html(data: bytes) -> str:
    """kbsync's HTML conversion before html-to-markdown (CONVERTER_VERSION 1), for comparison."""
    global _markitdown_html_converter
    from bs4 import BeautifulSoup
    from markitdown.converters import HtmlConverter

    if _markitdown_html_converter is None:
        _markitdown_html_converter = HtmlConverter()
    soup = BeautifulSoup(data, "html.parser")
    for tag in soup.find_all(_BOILERPLATE_TAGS):
        tag.decompose()
    for tag in soup.find_all(True):
        if tag.decomposed:
            continue
        attrs = tag.attrs or {}
        names = {str(c).lower() for c in attrs.get("class", ())} | {str(attrs.get("id", "")).lower()}
        if str(attrs.get("role", "")).lower() in _BOILERPLATE_ROLES or names & _BOILERPLATE_NAMES:
            tag.decompose()
        elif tag.name == "header" and not tag.find(["h1", "h2"]):
            tag.decompose()
    main = soup.find("main") or soup.find(None, {"role": "main"}) or soup.body or soup
    md = _markitdown_html_converter.convert_string(
        f"<html><body>{main}</body></html>", escape_underscores=False, escape_asterisks=False,
        escape_misc=False).markdown
    return tidy_tables(clean_images(normalize_newlines(md or "").strip()))


def _words(md: str) -> set[str]:
    return set(re.findall(r"\w+", re.sub(r"\]\([^)]*\)", "]", md).lower()))


def bench_real_html(shares: str) -> None:
    """Both converters over the same real pages, warm, one core; ratio per share."""
    import realshares

    print("\n## HTML on real shares: markitdown (CONVERTER_VERSION 1) vs html-to-markdown")
    print(f"{'share':18s} {'files':>5s} {'KiB/file':>8s} {'markitdown f/s':>15s} {'h2m f/s':>9s} "
          f"{'speed-up':>8s} {'words only md':>13s} {'only h2m':>9s}")
    for item in shares.split(","):
        name, _, count = item.partition(":")
        spec = realshares.SPECS[name]
        files = [src.read_bytes() for src, _ in realshares.spread(realshares.source_files(spec),
                                                                  int(count or 60))]
        markitdown_html(files[0])  # import and warm both
        convert_html(files[0], name="warm")
        started, cpu = time.perf_counter(), time.process_time()
        old = [markitdown_html(data) for data in files]
        old_wall, old_cpu = time.perf_counter() - started, time.process_time() - cpu
        started, cpu = time.perf_counter(), time.process_time()
        new = [convert_html(data, name=f"{name}-{i}").markdown for i, data in enumerate(files)]
        new_wall, new_cpu = time.perf_counter() - started, time.process_time() - cpu
        only_old = sum(len(_words(a) - _words(b)) / max(1, len(_words(a))) for a, b in zip(old, new))
        only_new = sum(len(_words(b) - _words(a)) / max(1, len(_words(b))) for a, b in zip(old, new))
        n = len(files)
        print(f"{name:18s} {n:5d} {sum(map(len, files)) / n / 1024:8.1f} {n / old_wall:15.1f} "
              f"{n / new_wall:9.1f} {old_wall / new_wall:7.1f}x {100 * only_old / n:12.2f}% "
              f"{100 * only_new / n:8.2f}%   (CPU: {n / old_cpu:.1f} vs {n / new_cpu:.1f} files/CPU-s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=2.0, help="minimum time per measurement")
    parser.add_argument("--markitdown-pdf", action="store_true", help="also time markitdown's PDF path")
    parser.add_argument("--html-shares", default="octave-html:60,handbook-zh-html:60,postgresql-html:60,"
                        "git-html:40,linux-zh-html:60",
                        help="real shares for the HTML comparison (NAME:FILES,...); '' skips it")
    parser.add_argument("--html-only", action="store_true", help="only the real-share HTML comparison")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core, as documented
    print(f"# kbsync conversion benchmark (python {sys.version.split()[0]}, pymupdf {pymupdf.VersionBind}, "
          f"one core, load average {os.getloadavg()[0]:.1f})")
    if not args.html_only:
        bench_import()
        bench_pdf(args.pages, args.seconds, args.markitdown_pdf)
        bench_formats(args.seconds / 4)
        bench_isolation(args.seconds / 2)
    if args.html_shares:
        bench_real_html(args.html_shares)


if __name__ == "__main__":
    main()
