"""OCR of scanned pages and image files: Tesseract, opt-in, page by page.

Only pages that need it are read: a PDF page whose text layer is missing (images, no text)
or garbled (see :func:`is_garbled`); pages with good text never come here. An image file
(PNG, JPEG, TIFF; each TIFF frame a page) is always read, and only with OCR on.

Engine: PyMuPDF renders each page to a grayscale pixmap; the Tesseract command line
(Debian ``tesseract-ocr`` with ``-eng`` and ``-chi-sim``) reads it and answers TSV, which
gives per-word confidence (PyMuPDF's built-in ``get_textpage_ocr`` runs the same engine but
reports none) and runs in its own process, so each page has its own time limit: a page over
``page_timeout_s`` has its ``tesseract`` killed and is reported in the warnings, and the other
pages still count. Measured in ``tests/bench/ocr_bench.py`` beside ``get_textpage_ocr``.

Page segmentation: :data:`PSM` (Tesseract's ``--psm``), chosen by measurement (see its
comment): automatic layout first; a page whose words cover under 90% of its ink
(:mod:`.ocr_coverage`), or whose confidence is under 85, is read again as one column, then
as one uniform block of text, and a later reading is kept when it scores clearly better
(:func:`~kbsync.convert.ocr_coverage.better_reading`). A page still under
:data:`~kbsync.convert.ocr_coverage.MIN_COVERAGE` is named in the document's warnings, since
Tesseract's confidence only speaks for the words it found.

Bounds: a file with more pages to read than ``max_pages`` (``KBSYNC_OCR_MAX_PAGES``) fails
with ``FileTooLarge`` before any page is read (:func:`check_page_count`); the file's own time
limit holds in the isolated workers whatever its pages (:mod:`kbsync.convert.isolate`).

Limits: one Tesseract thread per page (parallelism comes from the conversion workers);
pages rendered above :data:`MAX_PIXELS` are scaled down; no layout analysis beyond
Tesseract's blocks and lines, no tables, no headings.
"""

from __future__ import annotations

import csv
import functools
import io
import logging
import os
import re
import shutil
import subprocess
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

from kbsync.convert.ocr_coverage import (PSM, Box, better_reading, coverage_warning, gray_pixels,
                                         incomplete, ink_coverage)
from kbsync.convert.text import Extracted, join_pages
from kbsync.errors import ConversionError, EmptyDocument, FileTooLarge, NoTextLayer, UsageError
from kbsync.text.cjk import no_space_between

logger = logging.getLogger(__name__)

ENGINE = "tesseract"
IMAGE_EXTENSIONS: frozenset[str] = frozenset({".png", ".jpg", ".jpeg", ".tif", ".tiff"})
INSTALL_LINE = "apt-get install -y tesseract-ocr tesseract-ocr-eng tesseract-ocr-chi-sim"
ENABLE_HINT = f"turn OCR on with KBSYNC_OCR=true (needs `{INSTALL_LINE}`)"
OCR_OFF = "off"
"""The OCR key of a run without OCR (see :meth:`OcrConfig.key`)."""
MAX_PIXELS = 40_000_000  # ~A3 at 300 dpi; a poster-sized page is rendered at a lower dpi
GARBLED_SHARE = 0.3
_LANG = re.compile(r"^[A-Za-z0-9_]+(\+[A-Za-z0-9_]+)*$")

_page_hook: Callable[[float], None] | None = None


def set_page_hook(hook: Callable[[float], None] | None) -> None:
    """Call ``hook(seconds)`` before each page is OCR'd (the page's time limit, plus room
    to render it). The isolated worker uses it to tell its parent to wait that long."""
    global _page_hook
    _page_hook = hook


@dataclass(frozen=True)
class OcrConfig:
    """OCR settings, as plain values (picklable: sent to each conversion worker).

    Attributes:
        enabled: OCR on; off, scans stay ``NoTextLayer`` and images are not converted.
        languages: Tesseract language codes joined by ``+`` (``eng+chi_sim``).
        dpi: rendering resolution of PDF pages.
        page_timeout_s: wall-clock limit of one page's recognition.
        max_pages: most pages one file may have OCR'd; a file with more fails before any
            is read (:func:`check_page_count`).
        psm: Tesseract's page segmentation modes, tried in turn (:data:`PSM`): the next only
            while the best reading looks incomplete (see :func:`ocr_png`).
    """

    enabled: bool = False
    languages: str = "eng+chi_sim"
    dpi: int = 300
    page_timeout_s: float = 60.0
    max_pages: int = 200
    psm: tuple[int, ...] = PSM

    def key(self) -> str:
        """What shapes OCR output: engine, its version, languages, dpi and page segmentation
        (``off`` when off).

        It enters the fingerprint of documents that had scanned pages only, so switching
        OCR on (or changing its languages) reprocesses exactly those documents.
        """
        if not self.enabled:
            return OCR_OFF
        return f"{ENGINE}-{engine_version()}/{self.languages}/{self.dpi}dpi/psm{'+'.join(map(str, self.psm))}"


NO_OCR = OcrConfig()
"""OCR off: the default of every converter."""


@dataclass(frozen=True)
class OcrPage:
    """One page read by OCR: its text (paragraphs split by blank lines), the mean word
    confidence (0-100, Tesseract's scale; 0.0 when no word was found) and the share of the
    page's ink its words cover (0-1, :func:`~kbsync.convert.ocr_coverage.ink_coverage`;
    1.0 when not measured)."""

    text: str
    confidence: float
    coverage: float = 1.0


def check_available(config: OcrConfig) -> None:
    """Fail at the edge when OCR is on but cannot run.

    Raises:
        UsageError: ``tesseract`` is not on PATH, or a language's data is not installed.
    """
    if not config.enabled:
        return
    if not _LANG.match(config.languages):
        raise UsageError(f"KBSYNC_OCR_LANGUAGES={config.languages!r} is not valid: "
                         "Tesseract codes joined by '+' (eng+chi_sim)")
    if shutil.which("tesseract") is None:
        raise UsageError(f"KBSYNC_OCR=true but tesseract is not installed: run `{INSTALL_LINE}`")
    missing = set(config.languages.split("+")) - installed_languages()
    if missing:
        raise UsageError(f"KBSYNC_OCR_LANGUAGES={config.languages!r}: no Tesseract data for "
                         f"{', '.join(sorted(missing))} (apt-get install tesseract-ocr-<lang>)")


@functools.lru_cache(maxsize=1)
def engine_version() -> str:
    """``tesseract --version``'s version number (cached: one subprocess per process)."""
    out = subprocess.run(["tesseract", "--version"], capture_output=True, text=True,
                         timeout=30, check=False)
    first = (out.stdout or out.stderr).split("\n", 1)[0].split()
    return first[1] if len(first) > 1 else "unknown"


@functools.lru_cache(maxsize=1)
def installed_languages() -> frozenset[str]:
    """The language codes ``tesseract --list-langs`` names."""
    out = subprocess.run(["tesseract", "--list-langs"], capture_output=True, text=True,
                         timeout=30, check=False)
    return frozenset(line.strip() for line in out.stdout.splitlines()[1:] if line.strip())


def is_garbled(text: str, page=None) -> bool:
    """Whether a page's text layer is mojibake that must count as missing.

    Two tests, either suffices:

    * characters: over ``GARBLED_SHARE`` (30%) of the non-blank characters are U+FFFD (a
      glyph without a Unicode mapping), private-use or unassigned code points, or control
      characters. Real text in any script stays far below that.
    * fonts (when ``page``, a PyMuPDF page, is given): every font of the page is a composite
      (Type0) font with an ``Identity`` encoding and no ``ToUnicode`` map. Nothing then says
      which characters its glyphs are, and extractors hand back glyph ids as letters
      (``(BSCMFE`` for ``Garbled``), which no character test can tell from text.

    Limits: a page mixing mapped and unmapped fonts is not flagged; nor is text whose
    font maps glyphs to the wrong characters.
    """
    visible = [c for c in text if not c.isspace()]
    if not visible:
        return False
    bad = sum(1 for c in visible if c == "\ufffd" or unicodedata.category(c) in ("Co", "Cn", "Cc", "Cs"))
    if bad > GARBLED_SHARE * len(visible):
        return True
    return page is not None and _fonts_unmapped(page)


def _fonts_unmapped(page) -> bool:
    fonts = page.get_fonts()
    if not fonts:
        return False
    doc = page.parent
    for xref, _ext, kind, _base, _name, encoding in fonts:
        if kind != "Type0" or not encoding.startswith("Identity") or xref <= 0:
            return False
        if doc.xref_get_key(xref, "ToUnicode")[0] != "null":
            return False
    return True


def check_page_count(count: int, config: OcrConfig, *, name: str) -> None:
    """Refuse, before any page is read, a file with more than ``config.max_pages`` to OCR.

    Raises:
        FileTooLarge: one line naming the count, the cap and ``KBSYNC_OCR_MAX_PAGES``.
    """
    if count > config.max_pages:
        raise FileTooLarge(f"{name}: {count} pages to OCR, over the limit of {config.max_pages} "
                           "pages per file (KBSYNC_OCR_MAX_PAGES); nothing of it was indexed")


def ocr_png(png: bytes, config: OcrConfig, *, label: str, gray=None) -> OcrPage:
    """Read one rendered page; ``gray`` (its pixels, a 2-D uint8 array) measures the coverage.

    Each of ``config.psm`` in turn while the best reading so far looks incomplete
    (:func:`~kbsync.convert.ocr_coverage.incomplete`; without ``gray``, the first only); a
    later reading replaces it only when clearly better
    (:func:`~kbsync.convert.ocr_coverage.better_reading`: automatic layout keeps columns in
    order). Each run has its own time limit; a later run that fails or times out leaves the
    best reading so far.

    Raises:
        ConversionError: ``tesseract`` failed or ran past ``config.page_timeout_s``
            (its process is killed then); ``label`` names the page in the message.
    """
    best: OcrPage | None = None
    for psm in config.psm:
        if best is not None:
            if gray is None or not incomplete(best.coverage, best.confidence):
                break
            if _page_hook is not None:
                _page_hook(config.page_timeout_s + 30.0)  # a new run, a new page limit
        try:
            page = _tesseract(png, config, psm, label=label, gray=gray)
        except ConversionError as exc:
            if best is None:
                raise
            logger.warning("%s; the page keeps its best reading so far", exc)
            break
        if best is None or better_reading((page.coverage, page.confidence),
                                          (best.coverage, best.confidence)):
            best = page
    if best is None:
        raise UsageError("OcrConfig.psm is empty: name at least one page segmentation mode")
    return best


def _tesseract(png: bytes, config: OcrConfig, psm: int, *, label: str, gray) -> OcrPage:
    """One ``tesseract`` run in page segmentation mode ``psm``."""
    env = {**os.environ, "OMP_THREAD_LIMIT": "1"}  # workers give the parallelism
    try:
        out = subprocess.run(["tesseract", "stdin", "stdout", "-l", config.languages,
                              "--psm", str(psm), "tsv"],
                             input=png, capture_output=True, timeout=config.page_timeout_s,
                             env=env, check=False)
    except subprocess.TimeoutExpired as exc:
        raise ConversionError(f"{label}: OCR took over {config.page_timeout_s:g} s") from exc
    except OSError as exc:
        raise ConversionError(f"{label}: cannot run tesseract: {exc.strerror or exc}") from exc
    if out.returncode != 0:
        detail = " ".join(out.stderr.decode("utf-8", "replace").split())[:200]
        raise ConversionError(f"{label}: tesseract failed (status {out.returncode}: {detail})")
    text, confidence, boxes = parse_tsv(out.stdout.decode("utf-8", "replace"))
    coverage = 1.0 if gray is None else round(ink_coverage(gray, boxes), 3)
    return OcrPage(text, confidence, coverage)


def parse_tsv(tsv: str) -> tuple[str, float, list[Box]]:
    """Tesseract's TSV (one row per word, with block, paragraph and line numbers) as text,
    the mean word confidence and the words' boxes."""
    paragraphs: dict[tuple[str, str], dict[str, list[str]]] = {}
    confidences: list[tuple[float, int]] = []
    boxes: list[Box] = []
    for row in csv.DictReader(io.StringIO(tsv), delimiter="\t", quoting=csv.QUOTE_NONE):
        word = (row.get("text") or "").strip()
        if row.get("level") != "5" or not word:
            continue
        lines = paragraphs.setdefault((row["block_num"], row["par_num"]), {})
        lines.setdefault(row["line_num"], []).append(word)
        conf = float(row.get("conf") or -1)
        if conf >= 0:
            confidences.append((conf, len(word)))
        boxes.append(_box(row))
    texts = [_join([_join(words) for words in lines.values()]) for lines in paragraphs.values()]
    weight = sum(n for _, n in confidences)
    mean = sum(c * n for c, n in confidences) / weight if weight else 0.0
    return "\n\n".join(t for t in texts if t), round(mean, 1), boxes


def _box(row: dict[str, str]) -> Box:
    try:
        return int(row["left"]), int(row["top"]), int(row["width"]), int(row["height"])
    except (KeyError, TypeError, ValueError):
        return 0, 0, 0, 0  # a row without a box covers nothing


def _join(parts: list[str]) -> str:
    """Words (or lines) with spaces between, except between two CJK characters."""
    out = ""
    for part in parts:
        if out and not no_space_between(out, part):
            out += " "
        out += part
    return out


def ocr_page(page, config: OcrConfig, *, label: str, zoom: float | None = None) -> OcrPage:
    """Render a PyMuPDF page (at ``config.dpi``, or ``zoom`` times its size) and read it."""
    import pymupdf

    scale = zoom if zoom is not None else config.dpi / 72
    area = page.rect.width * page.rect.height * scale * scale
    if area > MAX_PIXELS:
        scale *= (MAX_PIXELS / area) ** 0.5
    if _page_hook is not None:
        _page_hook(config.page_timeout_s + 30.0)  # + rendering and parsing
    pix = page.get_pixmap(matrix=pymupdf.Matrix(scale, scale), colorspace=pymupdf.csGRAY, alpha=False)
    gray = gray_pixels(pix.samples, pix.width, pix.height, pix.stride)
    return ocr_png(pix.tobytes("png"), config, label=label, gray=gray)


def read_scanned_pages(doc, pages: list[str], numbers: list[int], config: OcrConfig, *,
                       name: str, warnings: list[str]) -> dict[int, float]:
    """OCR the 1-based page ``numbers`` of an open PyMuPDF document into ``pages``.

    Does nothing when OCR is off. A page that fails or times out keeps its empty text
    and is named in ``warnings``: one bad page never costs the document. So is a page whose
    words cover much less than its ink (:func:`~kbsync.convert.ocr_coverage.coverage_warning`).

    Returns:
        Page number -> mean word confidence, for each page OCR found text on.

    Raises:
        FileTooLarge: more ``numbers`` than ``config.max_pages`` (:func:`check_page_count`).
    """
    if not config.enabled or not numbers:
        return {}
    check_page_count(len(numbers), config, name=name)
    found: dict[int, float] = {}
    coverage: dict[int, float] = {}
    failed: list[str] = []
    for number in numbers:
        try:
            page = ocr_page(doc[number - 1], config, label=f"{name} page {number}")
        except ConversionError as exc:
            logger.warning("%s", exc)
            failed.append(f"page {number}: {str(exc).rsplit(': ', 1)[-1]}")
            continue
        coverage[number] = page.coverage
        if page.text:
            pages[number - 1] = page.text
            found[number] = page.confidence
    if failed:
        warnings.append(f"OCR failed on {len(failed)} page(s): {'; '.join(failed[:5])}")
    _warn_coverage(coverage, warnings)
    return found


def _warn_coverage(coverage: dict[int, float], warnings: list[str]) -> None:
    warning = coverage_warning(coverage)
    if warning is not None:
        warnings.append(warning)


def scan_message(name: str, page_count: int, config: OcrConfig) -> str:
    """The ``NoTextLayer`` message of a PDF none of whose pages has usable text."""
    if config.enabled:
        return f"{name}: {page_count} page(s) without a usable text layer, and OCR found no text"
    return (f"{name}: {page_count} page(s) of images or garbled text and no usable text layer "
            f"(a scan?); {ENABLE_HINT}")


def convert_image(data: bytes, *, ext: str, name: str, config: OcrConfig) -> Extracted:
    """OCR an image file; each frame (of a multi-page TIFF) is a page.

    Raises:
        NoTextLayer: OCR is off (the message says how to turn it on).
        CorruptDocument: not a readable image. EmptyDocument: OCR found no text.
        FileTooLarge: more frames than ``config.max_pages``.
    """
    import pymupdf

    from kbsync.errors import CorruptDocument

    if not config.enabled:
        raise NoTextLayer(f"{name}: an image, and OCR is off; {ENABLE_HINT}")
    try:
        doc = pymupdf.open(stream=data, filetype=ext.lstrip("."))
    except Exception as exc:
        raise CorruptDocument(f"{name}: not a readable image ({' '.join(str(exc).split())[:160]})") from exc
    warnings: list[str] = []
    try:
        check_page_count(doc.page_count, config, name=name)
        numbers = list(range(1, doc.page_count + 1))
        found: dict[int, OcrPage] = {}
        for number in numbers:
            page = doc[number - 1]
            zoom = _native_zoom(page)
            try:
                found[number] = ocr_page(page, config, label=f"{name} page {number}", zoom=zoom)
            except ConversionError as exc:
                if len(numbers) == 1:
                    raise
                warnings.append(str(exc))
    finally:
        doc.close()
    pages = [found[n].text if n in found else "" for n in numbers]
    _warn_coverage({n: p.coverage for n, p in found.items()}, warnings)
    if not any(p.strip() for p in pages):
        raise EmptyDocument(f"{name}: OCR found no text in the image")
    markdown, offsets = join_pages(pages)
    return Extracted(markdown, ENGINE, "image", offsets, warnings,
                     ocr_pages={n: p.confidence for n, p in found.items() if p.text},
                     scanned_pages=len(numbers))


def _native_zoom(page) -> float:
    """The zoom that renders an image page at its own pixel size (at least 1)."""
    images = page.get_images()
    if not images or not page.rect.width:
        return 1.0
    return max(images[0][2] / page.rect.width, 1.0)
