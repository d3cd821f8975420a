"""How much of a share is written in CJK scripts, read cheaply off its text files.

Used once per collection, before its first ingest, to choose the embedding model
(:mod:`kbsync.ingest.model_choice`). It reads no more than ``files`` text-like
files (HTML, Markdown, plain text, reStructuredText, AsciiDoc, XML) of at most
``head_bytes`` each, spread evenly over the share's sorted paths, and never runs a
converter: PDFs and office files are not sampled (a share of only those reads as
having no text, and keeps the English default).

The measure is CJK characters against Latin-script words: a Chinese sentence
spends about one character where English spends a word, so ``cjk / (cjk + words)``
is close to the share of the prose written in CJK, whatever the code, option
names and markup around it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from kbsync.text.cjk import CJK_WORD_CHARS

TEXT_SUFFIXES = frozenset({".html", ".htm", ".xhtml", ".md", ".markdown", ".txt", ".text",
                           ".rst", ".adoc", ".asciidoc", ".xml"})
_CJK = re.compile(f"[{CJK_WORD_CHARS}]")
_WORD = re.compile(r"[A-Za-z\u00c0-\u024f]{2,}")
_SCRIPT = re.compile(r"<(script|style)\b[^>]*>.*?</\1\s*>", re.DOTALL | re.IGNORECASE)
_TAG = re.compile(r"<[^>]{0,2000}>")
_CANDIDATES = 4096  # paths kept from the walk before the even spread is taken


@dataclass(frozen=True)
class LanguageSample:
    """What a sample read: files, CJK characters and Latin-script words."""

    files: int
    cjk_chars: int
    latin_words: int

    @property
    def cjk_share(self) -> float:
        """``cjk / (cjk + words)``; 0.0 when nothing was read."""
        total = self.cjk_chars + self.latin_words
        return self.cjk_chars / total if total else 0.0


def sample_language(roots: Sequence[Path], *, files: int = 64,
                    head_bytes: int = 16384) -> LanguageSample:
    """Count CJK characters and Latin-script words in the heads of up to ``files`` text
    files of ``roots`` (see the module doc). Unreadable files and folders are skipped."""
    paths = _spread(sorted(_text_files(roots)), files)
    cjk = words = read = 0
    for path in paths:
        text = _head_text(path, head_bytes)
        if text is None:
            continue
        read += 1
        cjk += len(_CJK.findall(text))
        words += len(_WORD.findall(text))
    return LanguageSample(files=read, cjk_chars=cjk, latin_words=words)


def _text_files(roots: Sequence[Path]) -> Iterable[Path]:
    """Text-like files under ``roots``, at most :data:`_CANDIDATES` (hidden folders skipped)."""
    found = 0
    for root in roots:
        for folder, dirs, names in os.walk(root, onerror=lambda _exc: None):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(names):
                if Path(name).suffix.lower() in TEXT_SUFFIXES:
                    yield Path(folder) / name
                    found += 1
                    if found >= _CANDIDATES:
                        return


def _spread(paths: list[Path], n: int) -> list[Path]:
    """At most ``n`` of ``paths``, evenly spaced (a share's first folder is not all of it)."""
    if len(paths) <= n:
        return paths
    step = len(paths) / n
    return [paths[int(i * step)] for i in range(n)]


def _head_text(path: Path, head_bytes: int) -> str | None:
    """The first ``head_bytes`` of ``path`` as text, markup removed; None if unreadable."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(head_bytes)
    except OSError:
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
