"""The one table of CJK characters (scripts written without spaces between words).

Three uses read it, each through its own column, because each needs a different set:

- :attr:`Use.WORD`, the letters of the scripts (Han, kana, hangul syllables): indexing
  cuts their runs into character unigrams and bigrams (hash embedder, the first BM25
  encoder), and the language sample, the hybrid weights of a query and the disk-space
  estimate count them (:func:`count_cjk`).
- :attr:`Use.TOKEN`, one chunker token per character: the letters, plus radicals, jamo,
  bopomofo, CJK punctuation, fullwidth forms and the ideographs beyond the BMP.
  U+3000 (ideographic space) is left out on purpose: it is whitespace, and ``str.split()``
  and ``re``'s ``\\s`` treat it so.
- :attr:`Use.JOIN`, where converters join two lines (PDF) or words (OCR) without a
  space (:func:`no_space_between`): Han, kana, CJK punctuation (ideographic space
  included) and the whole halfwidth/fullwidth block; no hangul, since Korean puts
  spaces between its words.

A column changes what is indexed or how chunks are cut: the chunker's is covered by
``CHUNKER_VERSION``, the BM25 encoder's by its ``SPARSE_VERSION``.
"""

from __future__ import annotations

import enum
import functools
import re


class Use(enum.Flag):
    """Which reading of the table a range belongs to (see the module doc)."""

    WORD = enum.auto()
    TOKEN = enum.auto()
    JOIN = enum.auto()


_W, _T, _J = Use.WORD, Use.TOKEN, Use.JOIN

TABLE: tuple[tuple[str, str, Use, str], ...] = (
    # first, last, uses, block
    ("\u1100", "\u11ff", _T, "Hangul Jamo"),
    ("\u2e80", "\u2fdf", _T, "CJK and Kangxi radicals"),
    ("\u3000", "\u3000", _J, "ideographic space"),
    ("\u3001", "\u303f", _T | _J, "CJK symbols and punctuation"),
    ("\u3040", "\u30ff", _W | _T | _J, "Hiragana, Katakana"),
    ("\u3100", "\u318f", _T, "Bopomofo, Hangul compatibility Jamo"),
    ("\u31a0", "\u31ff", _T, "Bopomofo extended, CJK strokes, Katakana phonetic extensions"),
    ("\u3200", "\u33ff", _T, "enclosed CJK letters, CJK compatibility"),
    ("\u3400", "\u4dbf", _W | _T | _J, "CJK Unified Ideographs extension A"),
    ("\u4e00", "\u9fff", _W | _T | _J, "CJK Unified Ideographs"),
    ("\ua960", "\ua97f", _T, "Hangul Jamo extended A"),
    ("\uac00", "\ud7af", _W | _T, "Hangul syllables"),
    ("\ud7b0", "\ud7ff", _T, "Hangul Jamo extended B"),
    ("\uf900", "\ufaff", _W | _T | _J, "CJK compatibility ideographs"),
    ("\ufe30", "\ufe4f", _T, "CJK compatibility forms"),
    ("\uff00", "\uff00", _J, "(unassigned, before the fullwidth forms)"),
    ("\uff01", "\uffee", _T | _J, "halfwidth and fullwidth forms"),
    ("\uffef", "\uffef", _J, "(unassigned, after them)"),
    ("\U00020000", "\U0003134f", _T, "CJK Unified Ideographs extensions B..G"),
)
"""Ranges in code point order, none overlapping."""


def chars(use: Use) -> str:
    """The ranges of ``use``, for the inside of a regular-expression character class
    (adjacent ranges merged)."""
    merged: list[list[str]] = []
    for first, last, uses, _block in TABLE:
        if use not in uses:
            continue
        if merged and ord(merged[-1][1]) + 1 == ord(first):
            merged[-1][1] = last
        else:
            merged.append([first, last])
    return "".join(first if first == last else f"{first}-{last}" for first, last in merged)


CJK_WORD_CHARS = chars(Use.WORD)
"""Letters of the CJK scripts, for a character class (see :attr:`Use.WORD`)."""
CJK_TOKEN_CHARS = chars(Use.TOKEN)
"""Characters the chunker counts one token each (see :attr:`Use.TOKEN`)."""
CJK_JOIN_CHARS = chars(Use.JOIN)
"""Characters converters join without a space (see :attr:`Use.JOIN`)."""

_WORD = f"[{CJK_WORD_CHARS}]"
_JOIN = f"[{CJK_JOIN_CHARS}]"


@functools.cache
def compiled(pattern: str) -> re.Pattern[str]:
    """``re.compile(pattern)``, once per process, on first use. A class over the CJK ranges
    takes ~3 ms to compile (its charset is optimized range by range): compiled at import,
    the six of the text tools cost every command ~17 ms, a no-op sync's included, which
    uses none of them (issue 42)."""
    return re.compile(pattern)


def count_cjk(text: str) -> int:
    """How many CJK letters (:attr:`Use.WORD`) ``text`` holds."""
    return len(compiled(_WORD).findall(text))


def no_space_between(left: str, right: str) -> bool:
    """Whether the last character of ``left`` and the first of ``right`` join without a
    space (:attr:`Use.JOIN`): CJK has no spaces between words, nor at line ends.

    Raises:
        IndexError: ``left`` or ``right`` is empty.
    """
    joins = compiled(_JOIN).match
    return bool(joins(left[-1]) and joins(right[0]))
