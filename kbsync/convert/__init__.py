"""Turn a file into Markdown: :func:`convert` is the one entry point.

Dispatch is by extension (lowercase): PDF -> :mod:`.pdf` (pymupdf, pypdf fallback);
DOCX/XLSX/PPTX/CSV -> :mod:`.office` (markitdown); HTML -> :mod:`.html`
(html-to-markdown); text, Markdown, reStructuredText,
JSON and source code -> :mod:`.text`; with OCR on (:class:`~kbsync.convert.ocr.OcrConfig`),
PNG/JPEG/TIFF images -> :mod:`.ocr`, which also reads a PDF's scanned pages; TSV and
files without an extension whose content is text -> :mod:`.plain_files`; e-mail (EML)
-> :mod:`.mail`. The file is
read once into memory between two ``stat`` calls, so every converter sees one consistent snapshot and a file that changes
meanwhile is reported (``FileChangedDuringRead``, a transient error) instead of being
indexed half-written.

Decisions worth knowing:

* A zero-byte file of any type raises ``EmptyDocument`` (it is empty, not damaged).
* Markdown without a letter or digit is never returned: ``EmptyDocument`` instead.
* Every error message is one line: ``<path>: <reason>``.
"""

from __future__ import annotations

import logging
import os
import re
import stat as stat_mod
from pathlib import Path

from kbsync.convert.html import CONVERTER_ID as HTML_CONVERTER_ID
from kbsync.convert.html import HTML_EXTENSIONS, convert_html
from kbsync.convert.ocr import ENABLE_HINT, IMAGE_EXTENSIONS, NO_OCR, OcrConfig, convert_image
from kbsync.convert.office import OFFICE_EXTENSIONS, convert_office
from kbsync.convert.pdf import convert_pdf
from kbsync.convert.plain_files import (NO_EXTENSION, TSV_EXTENSIONS, convert_extensionless,
                                        convert_tsv, is_text_file)
from kbsync.convert.safe_read import open_within
from kbsync.convert.text import TEXT_EXTENSIONS, Extracted, convert_text
from kbsync.errors import (
    ConversionError,
    EmptyDocument,
    FileChangedDuringRead,
    FileTooLarge,
    KbsyncError,
    PermissionDenied,
    UnsupportedFormat,
)
from kbsync.models import Document, display_path

__all__ = ["CONVERTER_VERSION", "IMAGE_EXTENSIONS", "SUPPORTED_EXTENSIONS", "OcrConfig", "convert",
           "ignored_kind", "is_supported"]

logger = logging.getLogger(__name__)

# Bump whenever the Markdown produced for the same bytes may change: it is part of the
# document fingerprint, so a bump re-converts (and re-chunks) every document.
# 2: HTML through html-to-markdown instead of markitdown; its version is part of the value,
# so an upgrade of the library (which may change its Markdown) re-converts too.
CONVERTER_VERSION = f"2+{HTML_CONVERTER_ID}"

MAIL_EXTENSIONS = frozenset({".eml"})
"""Read by :mod:`.mail`, imported when a message is converted: it imports the ``email``
package (~7 ms), and every ingest imports this one, a no-op's included (issue 42)."""

SUPPORTED_EXTENSIONS: frozenset[str] = (frozenset({".pdf"}) | HTML_EXTENSIONS | OFFICE_EXTENSIONS
                                         | TEXT_EXTENSIONS | TSV_EXTENSIONS | MAIL_EXTENSIONS)
"""Without OCR; with it, :data:`IMAGE_EXTENSIONS` too. Files without an extension are
read when their content is text (:func:`is_supported`)."""

_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_MAX_TITLE = 200
_WORD = re.compile(r"\w")


def is_supported(path: Path, *, ocr: bool = False) -> bool:
    """Whether :func:`convert` has a converter for this file's extension (case-insensitive).

    Images count only with ``ocr``: without it a share's screenshots and icons stay ignored,
    as they always were, instead of failing on every run. A file without an extension
    (``README``, ``Makefile``) counts when its first bytes are UTF-8 text
    (:func:`kbsync.convert.plain_files.is_text_file`: this reads them).

    Raises:
        OSError: an extensionless file that exists but cannot be read.
    """
    if not isinstance(path, Path):  # the walk's are Paths already: not parsed again
        path = Path(path)
    ext = path.suffix.lower()
    if not ext:
        return is_text_file(path)
    return ext in SUPPORTED_EXTENSIONS or (ocr and ext in IMAGE_EXTENSIONS)


def ignored_kind(name: str) -> str:
    """What an ignored file is, for the summary's ``ignored_by_kind``: its extension
    (lowercase), or ``(no extension)`` for a file without one that was not read as text
    (binary, empty, or a name that usually holds a secret)."""
    return Path(name).suffix.lower() or NO_EXTENSION


def convert(path: Path, *, doc_id: str, max_bytes: int = 100 * 2**20,
            ocr: OcrConfig = NO_OCR, within: Path | None = None) -> Document:
    """Convert one file to a :class:`~kbsync.models.Document`.

    Args:
        path: the file; symlinks are followed (discovery decides which links to keep).
        doc_id: stored as is in the result.
        max_bytes: files larger than this are refused before being read.
        ocr: OCR settings (off by default): scanned PDF pages and images are read only
            when ``ocr.enabled``.
        within: the file's root: the file is read only if, as opened, it lies inside it
            (:func:`kbsync.convert.safe_read.open_within`), so a link swapped in after
            discovery is refused (``SymlinkOutsideRoot``) instead of followed.

    Returns:
        A Document with non-empty ``markdown``; ``page_offsets`` for PDF and PPTX
        (strictly increasing, one per page or slide); ``warnings`` for partial results
        (a repaired PDF, pages without text, a fallback converter, an unknown encoding);
        ``ocr_pages`` and ``scanned_pages`` for PDFs and images.

    Raises:
        UnsupportedFormat: no converter for the extension (callers count it as ignored).
        PermissionDenied, FileTooLarge, FileChangedDuringRead, EmptyDocument,
        EncryptedDocument, CorruptDocument, NoTextLayer, ArchiveBomb: see kbsync.errors.
        ConversionError: any other read failure (an I/O error).
    """
    path = Path(path)
    name = _display(path)
    ext = path.suffix.lower()
    if ext in IMAGE_EXTENSIONS and not ocr.enabled:  # ignored, as before OCR existed
        raise UnsupportedFormat(f"{name}: an image ({ext}) and OCR is off; {ENABLE_HINT}")
    if ext and ext not in SUPPORTED_EXTENSIONS and ext not in IMAGE_EXTENSIONS:
        raise UnsupportedFormat(f"{name}: unsupported file type {ext or '(no extension)'}")
    data = _read_stable(path, name, max_bytes, within)
    if not data:
        raise EmptyDocument(f"{name}: file is empty (0 bytes)")
    try:
        extracted = _dispatch(data, ext, name, ocr)
    except (KbsyncError, MemoryError):
        raise
    except Exception as exc:  # a converter bug must cost one file, not the batch
        # One line for a person; the traceback only at debug level (issue 11.2).
        logger.warning("%s: unexpected converter failure: %s: %s", name, type(exc).__name__,
                       _one_line(exc)[:200])
        logger.debug("traceback of the converter failure on %s", name, exc_info=exc)
        raise ConversionError(f"{name}: converter failed ({type(exc).__name__}: {_one_line(exc)[:200]})") from exc
    if not _WORD.search(extracted.markdown):  # only blanks, table rules or fences left
        raise EmptyDocument(f"{name}: no text after conversion ({extracted.source_type})")
    for warning in extracted.warnings:
        logger.info("%s: %s", name, warning)
    return Document(
        doc_id=doc_id,
        path=str(path),
        markdown=extracted.markdown,
        title=_title(extracted.markdown if extracted.title_from_heading else "", extracted.title_hint, path),
        source_type=extracted.source_type,
        converter=extracted.converter,
        page_offsets=extracted.page_offsets,
        warnings=[_one_line(w) for w in extracted.warnings],
        ocr_pages=extracted.ocr_pages,
        scanned_pages=extracted.scanned_pages,
    )


def _dispatch(data: bytes, ext: str, name: str, ocr: OcrConfig) -> Extracted:
    if ext == ".pdf":
        return convert_pdf(data, name=name, ocr=ocr)
    if ext in IMAGE_EXTENSIONS:
        return convert_image(data, ext=ext, name=name, config=ocr)
    if ext in HTML_EXTENSIONS:
        return convert_html(data, name=name)
    if ext in OFFICE_EXTENSIONS:
        return convert_office(data, ext=ext, name=name)
    if ext in TSV_EXTENSIONS:
        return convert_tsv(data, name=name)
    if ext in MAIL_EXTENSIONS:
        from kbsync.convert.mail import convert_eml

        return convert_eml(data, name=name)
    if not ext:  # discovery read it as text by its content
        return convert_extensionless(data, name=name)
    return convert_text(data, ext=ext, name=name)


def _read_stable(path: Path, name: str, max_bytes: int, within: Path | None = None) -> bytes:
    """Read the whole file from one descriptor (checked inside ``within`` when given),
    refusing it if its size or mtime changed meanwhile, or its path now names another file."""
    try:
        if not stat_mod.S_ISREG(os.stat(path).st_mode):
            # before open(): a device or socket is never opened (the fstat below decides)
            raise UnsupportedFormat(f"{name}: not a regular file")
        with os.fdopen(open_within(path, within), "rb") as handle:
            before = os.fstat(handle.fileno())
            if not stat_mod.S_ISREG(before.st_mode):
                # opened non-blocking, so a FIFO never blocks; it is refused unread
                raise UnsupportedFormat(f"{name}: not a regular file")
            if before.st_size > max_bytes:
                raise FileTooLarge(f"{name}: {before.st_size} bytes, over the {max_bytes}-byte limit")
            data = handle.read(max_bytes + 1)
            after = os.fstat(handle.fileno())
        named = os.stat(path)  # replaced (renamed over) while read: what was read is stale
    except PermissionError as exc:
        raise PermissionDenied(f"{name}: permission denied") from exc
    except FileNotFoundError as exc:
        raise FileChangedDuringRead(f"{name}: file disappeared before it could be read") from exc
    except IsADirectoryError as exc:
        raise UnsupportedFormat(f"{name}: is a directory") from exc
    except OSError as exc:
        raise ConversionError(f"{name}: read failed: {_one_line(exc.strerror or str(exc))}") from exc
    if len(data) > max_bytes:
        raise FileTooLarge(f"{name}: grew past the {max_bytes}-byte limit while being read")
    key_before = (before.st_size, before.st_mtime_ns, before.st_ino)
    key_after = (after.st_size, after.st_mtime_ns, named.st_ino)
    if key_before != key_after or len(data) != before.st_size:
        raise FileChangedDuringRead(f"{name}: file changed while it was being read")
    return data


def _title(markdown: str, hint: str | None, path: Path) -> str:
    """First Markdown heading outside code fences, else the format's hint, else the stem."""
    in_fence: str | None = None
    for line in markdown.split("\n"):
        fence = _FENCE.match(line)
        if fence:
            marker = fence.group(1)
            if in_fence is None:
                in_fence = marker
            elif marker[0] == in_fence[0] and len(marker) >= len(in_fence):
                in_fence = None
            continue
        if in_fence is None:
            match = _HEADING.match(line)
            if match:
                title = _clean_title(match.group(2))
                if title:
                    return title
    if hint and hint.strip():
        return _clean_title(hint)
    return display_path(path.stem)  # a name with undecodable bytes: \xNN escapes


def _clean_title(text: str) -> str:
    text = re.sub(r"[*_`]+", "", text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # [label](url) -> label
    return " ".join(text.split())[:_MAX_TITLE]


def _display(path: Path) -> str:
    """The path as printable text, even when the name is not valid UTF-8 (``\\xNN``, as in doc_ids)."""
    return display_path(path)


def _one_line(text: object) -> str:
    return " ".join(str(text).split())
