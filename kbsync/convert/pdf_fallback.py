"""The PDF fallback: pypdf, when pymupdf cannot open or read a file; and pypdf's warnings.

pypdf logs what it repairs on a broken file ("invalid pdf header", "EOF marker not found")
on its own logger. With no handler configured (a conversion worker process, the CLI),
Python's last-resort handler printed those lines on stderr as raw library noise. They
are routed through ours at DEBUG instead (:class:`_PypdfNotes`), and the ones a file's
conversion produced are handed to it (:func:`pypdf_notes`): its failure message or its
notes say them.
"""

from __future__ import annotations

import io
import logging
import threading
from contextlib import contextmanager
from typing import Iterator

from kbsync.convert.text import Extracted, join_pages, normalize_newlines
from kbsync.errors import CorruptDocument, EmptyDocument, EncryptedDocument

logger = logging.getLogger(__name__)

PYPDF_LOGGER = "pypdf"
"""pypdf's logger."""

_notes = threading.local()


class _PypdfNotes(logging.Handler):
    """pypdf's records: the current conversion's notes (this thread's), and a DEBUG line
    of ours; never stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        text = " ".join(record.getMessage().split())
        taken = getattr(_notes, "lines", None)
        if taken is not None and text not in taken:
            taken.append(text)
        logger.debug("pypdf: %s", text)


def _route_pypdf() -> None:
    """Send pypdf's logger to :class:`_PypdfNotes` only (once)."""
    pypdf_log = logging.getLogger(PYPDF_LOGGER)
    if not any(isinstance(h, _PypdfNotes) for h in pypdf_log.handlers):
        pypdf_log.addHandler(_PypdfNotes())
    pypdf_log.propagate = False


@contextmanager
def pypdf_notes() -> Iterator[list[str]]:
    """The lines pypdf logs in this thread inside the block (each once), in a list that
    fills as it goes; none of them reaches stderr."""
    _route_pypdf()
    noted: list[str] = []
    _notes.lines = noted
    try:
        yield noted
    finally:
        _notes.lines = None


def convert_pypdf(data: bytes, name: str) -> Extracted:
    """A PDF's text with pypdf, page by page (no layout recovery).

    Raises:
        EncryptedDocument: a user password is needed (or the algorithm is unsupported).
        CorruptDocument: no pages. EmptyDocument: pages without text.
    """
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data), strict=False)
    if reader.is_encrypted:
        try:
            ok = reader.decrypt("")
        except Exception as exc:  # unsupported algorithm or missing crypto backend
            said = " ".join(str(exc).split())[:160] or type(exc).__name__
            raise EncryptedDocument(f"{name}: PDF is encrypted ({said})") from exc
        if not ok:
            raise EncryptedDocument(f"{name}: PDF is encrypted with a user password")
    pages = [normalize_newlines(page.extract_text() or "").strip() for page in reader.pages]
    if not pages:
        raise CorruptDocument(f"{name}: PDF has no pages")
    if not any(pages):
        raise EmptyDocument(f"{name}: PDF has {len(pages)} page(s) and no text (pypdf)")
    markdown, offsets = join_pages(pages)
    return Extracted(markdown, "pypdf", "pdf", offsets, [])
