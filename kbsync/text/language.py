"""How much of a share is written in CJK scripts, read cheaply off a sample of its files.

Used once per collection, before its first ingest, to choose the embedding model
(:mod:`kbsync.ingest.model_choice`). It reads no more than ``files`` text-like
files (HTML, Markdown, plain text, reStructuredText, AsciiDoc, XML) of at most
``head_bytes`` each, spread evenly over the share's sorted paths. Other documents
(PDF, office, e-mail: ``other_suffixes``) have no text to read raw: the caller may
pass ``read_other``, a converter, and then up to ``other_files`` of them, spread the
same way, are converted and their text's head counted. The two parts are weighted by
how many files of each kind the share holds, so a share of Chinese PDFs beside a few
English READMEs reads as mostly Chinese. This module runs no converter itself.

The measure is CJK characters against Latin-script words: a Chinese sentence
spends about one character where English spends a word, so ``cjk / (cjk + words)``
is close to the share of the prose written in CJK, whatever the code, option
names and markup around it.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

from kbsync.errors import SymlinkOutsideRoot
from kbsync.text.cjk import count_cjk

TEXT_SUFFIXES = frozenset({".html", ".htm", ".xhtml", ".md", ".markdown", ".txt", ".text",
                           ".rst", ".adoc", ".asciidoc", ".xml"})
_WORD = re.compile(r"[A-Za-z\u00c0-\u024f]{2,}")
_SCRIPT = re.compile(r"<(script|style)\b[^>]*>.*?</\1\s*>", re.DOTALL | re.IGNORECASE)
_TAG = re.compile(r"<[^>]{0,2000}>")
_CANDIDATES = 4096  # paths kept from the walk before the even spread is taken


@dataclass(frozen=True)
class LanguageSample:
    """What a sample read: files, CJK characters and Latin-script words.

    ``converted`` of the ``files`` were converted documents (PDF, office), not read raw;
    ``weighted_share``, when set, is the share of CJK with each kind of file weighted by
    its count in the share (see the module doc), and :attr:`cjk_share` returns it.
    """

    files: int
    cjk_chars: int
    latin_words: int
    converted: int = 0
    weighted_share: float | None = None

    @property
    def cjk_share(self) -> float:
        """``cjk / (cjk + words)`` (or the weighted share); 0.0 when nothing was read."""
        if self.weighted_share is not None:
            return self.weighted_share
        total = self.cjk_chars + self.latin_words
        return self.cjk_chars / total if total else 0.0


ReadOther = Callable[[Path], "str | None"]
"""Text of a document that is not read raw (a converter), or None when it has none."""

OpenWithin = Callable[[Path, Path], int]
"""``open_file(path, root)``: a read-only, non-blocking descriptor of ``path`` whose real path
lies under ``root``, raising ``OSError`` or ``SymlinkOutsideRoot`` otherwise: the run's own safe
open, :func:`kbsync.convert.safe_read.open_within`, injected (this floor may not import it)."""


def sample_language(roots: Sequence[Path], *, open_file: OpenWithin, files: int = 64,
                    head_bytes: int = 16384, read_other: ReadOther | None = None,
                    other_suffixes: frozenset[str] = frozenset(),
                    other_files: int = 4) -> LanguageSample:
    """Count CJK characters and Latin-script words in the heads of up to ``files`` text
    files of ``roots``, and of up to ``other_files`` documents ``read_other`` converts
    (see the module doc). Text files are opened with ``open_file``, as the run opens them.
    Unreadable files and folders are skipped, and so are files that are not regular or that
    lead out of their root; so is a document ``read_other`` returns None for."""
    text_paths: list[Path] = []
    other_paths: list[Path] = []
    root_of: dict[Path, Path] = {}
    for root, path in _candidate_files(roots, TEXT_SUFFIXES | other_suffixes):
        (text_paths if path.suffix.lower() in TEXT_SUFFIXES else other_paths).append(path)
        root_of[path] = root
    raw = _count(_spread(sorted(text_paths), files),
                 lambda path: _head_text(path, head_bytes, root_of[path], open_file))
    if read_other is None or not other_paths:
        return raw
    converted = _count(_spread(sorted(other_paths), other_files),
                       lambda path: _head_of(read_other(path), head_bytes))
    return _weigh(raw, len(text_paths), converted, len(other_paths))


def _count(paths: Iterable[Path], read: Callable[[Path], str | None]) -> LanguageSample:
    cjk = words = done = 0
    for path in paths:
        text = read(path)
        if text is None:
            continue
        done += 1
        cjk += count_cjk(text)
        words += len(_WORD.findall(text))
    return LanguageSample(files=done, cjk_chars=cjk, latin_words=words)


def _weigh(raw: LanguageSample, raw_count: int, converted: LanguageSample,
           converted_count: int) -> LanguageSample:
    """Both parts in one sample, each part's share weighted by its kind's file count."""
    parts = [(part, count) for part, count in ((raw, raw_count), (converted, converted_count))
             if part.cjk_chars + part.latin_words]
    weight = sum(count for _part, count in parts)
    share = sum(part.cjk_share * count for part, count in parts) / weight if weight else 0.0
    return LanguageSample(files=raw.files + converted.files,
                          cjk_chars=raw.cjk_chars + converted.cjk_chars,
                          latin_words=raw.latin_words + converted.latin_words,
                          converted=converted.files, weighted_share=share)


def _head_of(text: str | None, head_bytes: int) -> str | None:
    """About the first ``head_bytes`` of a converted text (counted in characters)."""
    return None if text is None else text[:head_bytes]


def _candidate_files(roots: Sequence[Path],
                     suffixes: frozenset[str]) -> Iterable[tuple[Path, Path]]:
    """``(root, file)`` for files under ``roots`` whose suffix is one of ``suffixes``, sorted
    per folder, at most :data:`_CANDIDATES` (hidden folders skipped)."""
    found = 0
    for root in roots:
        for folder, dirs, names in os.walk(root, onerror=lambda _exc: None):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(names):
                if Path(name).suffix.lower() in suffixes:
                    yield root, Path(folder) / name
                    found += 1
                    if found >= _CANDIDATES:
                        return


def _spread(paths: list[Path], n: int) -> list[Path]:
    """At most ``n`` of ``paths``, evenly spaced (a share's first folder is not all of it)."""
    if len(paths) <= n:
        return paths
    step = len(paths) / n
    return [paths[int(i * step)] for i in range(n)]


def _head_text(path: Path, head_bytes: int, root: Path, open_file: OpenWithin) -> str | None:
    """The first ``head_bytes`` of ``path`` as text, markup removed; None if unreadable, not
    a regular file (a FIFO named like a text file: a plain blocking open hung the ingest), or
    outside ``root`` through a link (the run refuses to read that file; so does the sample)."""
    try:
        with os.fdopen(open_file(path, root), "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None
            raw = handle.read(head_bytes)
    except (OSError, SymlinkOutsideRoot):
        return None
    text = _decode(raw)
    if path.suffix.lower() in {".html", ".htm", ".xhtml", ".xml"}:
        text = _TAG.sub(" ", _SCRIPT.sub(" ", text))
    return text


def _decode(raw: bytes) -> str:
    """UTF-8 (a cut multi-byte tail ignored), else GB18030 (older Chinese pages), else Latin-1."""
    for encoding in ("utf-8", "gb18030"):
        try:
            return raw.decode(encoding)
        except UnicodeDecodeError as exc:
            if encoding == "utf-8" and exc.start >= len(raw) - 3:
                return raw[:exc.start].decode("utf-8", errors="ignore")
    return raw.decode("latin-1")
