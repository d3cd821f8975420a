"""DOCX, XLSX, PPTX and CSV to Markdown through markitdown's converters (HTML: :mod:`.html`).

markitdown is imported once per process, lazily (its import costs ~2 s). We call the
format's own markitdown converter (``DocxConverter``, ``XlsxConverter``...) rather than
``MarkItDown().convert()``: the facade runs magika (an ONNX model) on every file and, when
the right converter fails, falls through to others, so a broken ``.docx`` could come back
as plain-text garbage instead of an error. Calling the converter directly keeps a failure a
failure. The instances hold no per-call state, so one set is shared by all threads.

OOXML files (docx/xlsx/pptx) are checked with ``zipfile`` before markitdown sees them:
an OLE2/CFB container is an encrypted (or legacy binary) Office file; a bad zip is corrupt;
the sum of declared uncompressed sizes, their ratio to the compressed sizes and the member
count are bounded (``ArchiveBomb``). The declared sizes can be trusted as bounds because
Python's ``zipfile`` stops reading a member at its declared size and then fails its CRC.
"""

from __future__ import annotations

import io
import logging
import re
import threading
import zipfile
import zlib
from typing import Any

from kbsync.convert.text import Extracted, decode_text, join_pages, normalize_newlines
from kbsync.errors import ArchiveBomb, CorruptDocument, EncryptedDocument

logger = logging.getLogger(__name__)

OFFICE_EXTENSIONS = frozenset({".docx", ".xlsx", ".pptx", ".csv"})

MAX_UNCOMPRESSED = 500 * 2**20
MAX_RATIO = 100
RATIO_FLOOR = 10 * 2**20  # below this total, a high ratio is harmless (tiny XML compresses well)
MAX_MEMBERS = 10_000
TABLE_BLOCK_CHARS = 1500  # long tables are cut into blocks of about this size, header repeated

_CFB_MAGIC = bytes.fromhex("D0CF11E0A1B11AE1")
_ENCRYPTION_INFO = "EncryptionInfo".encode("utf-16-le")
_REQUIRED_PART = {".docx": "word/", ".xlsx": "xl/", ".pptx": "ppt/"}
_SLIDE_MARKER = re.compile(r"<!-- Slide number: (\d+) -->\n?")
_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
_DEFAULT_SHAPE_NAME = re.compile(r"^(Picture|Image|Graphic|Content Placeholder)\s*\d*$", re.I)
_PANDAS_BLANK = re.compile(r"\s*(NaN|Unnamed: \d+)\s*")
# markdownify escapes _ and * by default ("invalid\\_event"): noise for search and embeddings,
# where the text matters more than round-tripping to HTML.
_MARKDOWNIFY = {"escape_underscores": False, "escape_asterisks": False, "escape_misc": False}

_lock = threading.Lock()
_converters: dict[str, Any] | None = None


def _get_converters() -> dict[str, Any]:
    """The markitdown converters, created once per process (thread-safe)."""
    global _converters
    if _converters is None:
        with _lock:
            if _converters is None:
                from markitdown.converters import (
                    CsvConverter,
                    DocxConverter,
                    PptxConverter,
                    XlsxConverter,
                )

                _converters = {
                    ".docx": DocxConverter(), ".xlsx": XlsxConverter(), ".pptx": PptxConverter(),
                    ".csv": CsvConverter(),
                }
    return _converters


def preload() -> None:
    """Import markitdown now (e.g. at worker start) instead of on the first office file."""
    _get_converters()


def convert_office(data: bytes, *, ext: str, name: str) -> Extracted:
    """Convert an Office or CSV file.

    Raises:
        EncryptedDocument: an OOXML file in an encrypted OLE2 container.
        ArchiveBomb: uncompressed size, ratio or member count over the limits.
        CorruptDocument: not a valid file of its type, or markitdown failed on it.
    """
    if ext in _REQUIRED_PART:
        check_ooxml(data, ext=ext, name=name)
    if ext == ".csv":
        text, _encoding, warnings = decode_text(data, name)
        md = _run(".csv", normalize_newlines(text).encode("utf-8"), ext, name, charset="utf-8")
        return Extracted(tidy_tables(md), "markitdown", "csv", warnings=warnings)
    md = _run(ext, _slim_docx(data) if ext == ".docx" else data, ext, name)
    if ext == ".pptx":
        return _pptx_pages(md)
    if ext == ".xlsx":
        # sheet names are the headings: the first one is no title for the workbook
        return Extracted(tidy_tables(_drop_empty_sheets(_clean_sheet_cells(md))), "markitdown", "xlsx",
                         title_from_heading=False)
    return Extracted(tidy_tables(clean_images(md)), "markitdown", "docx")


def check_ooxml(data: bytes, *, ext: str, name: str) -> None:
    """Structural checks of a docx/xlsx/pptx before any parser touches it."""
    if data[:8] == _CFB_MAGIC:
        if _ENCRYPTION_INFO in data:
            raise EncryptedDocument(f"{name}: password-protected Office file")
        raise CorruptDocument(f"{name}: legacy binary Office (OLE2) file, not {ext}")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, OSError) as exc:
        raise CorruptDocument(f"{name}: not a valid {ext} (bad zip: {exc})") from exc
    if len(infos) > MAX_MEMBERS:
        raise ArchiveBomb(f"{name}: {len(infos)} zip members (limit {MAX_MEMBERS})")
    total = sum(i.file_size for i in infos)
    packed = sum(i.compress_size for i in infos)
    if total > MAX_UNCOMPRESSED:
        raise ArchiveBomb(f"{name}: expands to {total / 2**20:.0f} MiB (limit {MAX_UNCOMPRESSED // 2**20} MiB)")
    if total > RATIO_FLOOR and total > MAX_RATIO * max(packed, 1):
        raise ArchiveBomb(f"{name}: compression ratio {total / max(packed, 1):.0f}:1 (limit {MAX_RATIO}:1)")
    prefix = _REQUIRED_PART[ext]
    if not any(i.filename.startswith(prefix) for i in infos):
        raise CorruptDocument(f"{name}: zip file without {prefix} parts: not a {ext}")


_STYLE_BLOCK = re.compile(rb"<w:style\b[^>]*?(?:/>|>.*?</w:style>)", re.S)
_STYLE_ID = re.compile(rb'w:styleId="([^"]*)"')
_STYLE_LINKS = re.compile(rb'<w:(?:basedOn|link|next) w:val="([^"]*)"')
_STYLE_REFS = re.compile(rb'<w:(?:pStyle|rStyle|tblStyle|numStyleLink|styleLink) w:val="([^"]*)"')
_LATENT = re.compile(rb"<w:latentStyles\b.*?</w:latentStyles>", re.S)


def _slim_docx(data: bytes) -> bytes:
    """Drop unused style definitions from word/styles.xml before mammoth parses it.

    mammoth reads styles.xml with minidom, and templates ship hundreds of unused styles
    (python-docx's default: 350 KB, ~1 s of parsing for a two-page document). Only
    styles referenced by the document parts, their ``basedOn``/``link`` ancestors and
    the defaults are kept, so the conversion is unchanged. Any surprise: the original.
    """
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        styles = archive.read("word/styles.xml")
        if len(styles) < 64 * 1024:
            return data
        used: set[bytes] = set()
        for info in archive.infolist():
            if info.filename.startswith("word/") and info.filename.endswith(".xml") \
                    and info.filename != "word/styles.xml" and info.file_size < 64 * 2**20:
                used.update(_STYLE_REFS.findall(archive.read(info.filename)))
        blocks = {m.group(0): (_STYLE_ID.search(m.group(0)) or [b"", b""])[1]
                  for m in _STYLE_BLOCK.finditer(styles)}
        by_id = {sid: block for block, sid in blocks.items()}
        keep = {sid for block, sid in blocks.items() if b'w:default="1"' in block[:300]} | used
        pending = list(keep)
        while pending:
            block = by_id.get(pending.pop())
            for parent in _STYLE_LINKS.findall(block or b""):
                if parent not in keep:
                    keep.add(parent)
                    pending.append(parent)
        slim = _STYLE_BLOCK.sub(lambda m: m.group(0) if blocks.get(m.group(0)) in keep else b"", styles)
        slim = _LATENT.sub(b"", slim)
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as target:
            for info in archive.infolist():
                body = slim if info.filename == "word/styles.xml" else archive.read(info.filename)
                target.writestr(info.filename, body)
        return out.getvalue()
    except (zipfile.BadZipFile, KeyError, OSError, ValueError, EOFError, zlib.error) as exc:
        logger.debug("docx style slimming skipped: %s", exc)
        return data  # mammoth reports whatever is really wrong


def _run(key: str, data: bytes, ext: str, name: str, charset: str | None = None) -> str:
    from markitdown import StreamInfo

    converter = _get_converters()[key]
    info = StreamInfo(extension=key, charset=charset, filename=name)
    try:
        result = converter.convert(io.BytesIO(data), info, **_MARKDOWNIFY)
    except MemoryError:
        raise
    except Exception as exc:  # markitdown and its parsers raise anything; all mean unreadable
        detail = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise CorruptDocument(f"{name}: cannot read {ext} ({type(exc).__name__}: {detail})") from exc
    return normalize_newlines(result.markdown or "").strip()


# --- PPTX ---------------------------------------------------------------------------
def _pptx_pages(md: str) -> Extracted:
    """One page per slide, from markitdown's ``<!-- Slide number: N -->`` markers."""
    pieces = _SLIDE_MARKER.split(md)
    # split() gives [before, num, text, num, text, ...]; text before the first marker is none
    slides = [tidy_tables(clean_images(pieces[i + 1])).strip() for i in range(1, len(pieces), 2)]
    if not slides:
        return Extracted(clean_images(md), "markitdown", "pptx")
    markdown, offsets = join_pages(slides)
    return Extracted(markdown, "markitdown", "pptx", offsets)


def clean_images(md: str) -> str:
    """Images become their alt text; default shape names and empty alts are dropped."""

    def repl(m: re.Match[str]) -> str:
        alt = m.group(1).strip()
        return "" if not alt or _DEFAULT_SHAPE_NAME.match(alt) else f"[Image: {alt}]"

    return _IMAGE.sub(repl, md)


# --- tables -------------------------------------------------------------------------
def _clean_sheet_cells(md: str) -> str:
    """pandas writes empty cells as ``NaN`` and blank headers as ``Unnamed: N``."""
    out = []
    for line in md.split("\n"):
        if line.startswith("|") and line.endswith("|"):
            cells = line[1:-1].split("|")
            cells = [" " if _PANDAS_BLANK.fullmatch(c) else c for c in cells]
            line = "|" + "|".join(cells) + "|"
        out.append(line)
    return "\n".join(out)


def _drop_empty_sheets(md: str) -> str:
    """Remove ``## Sheet`` sections without a single non-empty cell (blank sheets)."""
    sections = re.split(r"(?m)^(?=## )", md)
    kept = [sec for sec in sections if re.search(r"\w", sec.split("\n", 1)[1] if "\n" in sec else "")]
    return "\n\n".join(sec.strip() for sec in kept)


def tidy_tables(md: str) -> str:
    """Fix up Markdown tables: a real header row, repeated along long tables.

    Word tables carry no header flag, so markitdown writes an empty header row and the
    real one as the first data row: that row is promoted. Long tables are cut into
    blocks of about ``TABLE_BLOCK_CHARS``, each starting with the header again, so a
    chunk from the middle of a long sheet still says what its columns are.
    """
    lines = md.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        is_table = (lines[i].startswith("|") and i + 1 < len(lines)
                    and re.fullmatch(r"\|(\s*:?-{3,}:?\s*\|)+", lines[i + 1].replace(" ", "")))
        if not is_table:
            out.append(lines[i])
            i += 1
            continue
        header = lines[i : i + 2]
        i += 2
        if not lines[i - 2].replace("|", "").strip() and i < len(lines) and lines[i].startswith("|"):
            header[0] = lines[i]  # empty header row: the first data row is the header
            i += 1
        out.extend(header)
        size = 0
        while i < len(lines) and lines[i].startswith("|"):
            if size and size + len(lines[i]) > TABLE_BLOCK_CHARS:
                out.extend(["", *header])
                size = 0
            out.append(lines[i])
            size += len(lines[i]) + 1
            i += 1
    return "\n".join(out)
