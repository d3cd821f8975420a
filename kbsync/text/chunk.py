"""Markdown chunker: heading sections, paragraph packing, CJK-aware token budget.

The Markdown is cut into *sections* at ATX headings (``#`` .. ``######``) that
lie outside fenced code blocks. Each section is cut into *units*: the whole
section when it fits, else its paragraphs, and a paragraph over the budget is
cut again at the first separator level that occurs in it: blank line, line
break, sentence end (``。！？；.!?;``, punctuation kept with its sentence),
comma (``，,``), whitespace, then hard character cuts. Units are packed
greedily into chunks; each chunk after the first of a section starts with an
overlap taken from the tail of the previous chunk.

Invariants (tests/text/test_chunk_properties.py checks them):

* every chunk's text is exactly ``markdown[start:end]`` for its span
  (``ChunkResult.spans``), without leading or trailing whitespace;
* reading the chunks in order and skipping what overlaps the previous chunk
  reproduces every non-whitespace character of the input, in order (before
  empty and duplicate chunks are dropped; a dropped duplicate's text is kept);
* no chunk holds more than ``max_tokens`` tokens (:func:`count_tokens`) or
  more than ``max_chars`` characters, whatever the input;
* consecutive chunks of one section share at most ``overlap`` tokens, and
  chunks of different sections share nothing;
* output is a pure function of the arguments; time is linear in the input;
* with ``config.fit`` (a model's input limit, counted in its own tokenizer), a
  chunk that does not fit is replaced by its own text (less the overlap it
  took from the previous chunk) chunked again under a budget cut in proportion
  to its overflow, up to ``_FIT_ROUNDS`` times (what is still too long is cut
  by the model, and counted). Chunks that fit are kept as planned; the first
  piece of a replaced chunk carries no overlap. With ``config.contextual`` the
  fit counts what is embedded: the chunk with its title and heading path in
  front (:mod:`kbsync.text.context`).

Token counts of units are computed once and added up. This is safe because
counting is subadditive: ``count_tokens(a + b) <= count_tokens(a) +
count_tokens(b)`` (joining two strings can merge two words, never split one).
"""

from __future__ import annotations

import logging
import re
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from kbsync.models import Chunk, Document
from kbsync.text.budget import DEFAULT_TOKENS, ChunkConfig, InputFit, chunk_budget
from kbsync.text.cjk import CJK_TOKEN_CHARS, compiled
from kbsync.text.context import contextual_text

logger = logging.getLogger(__name__)

__all__ = ["CHUNKER_VERSION", "DEFAULT_TOKENS", "ChunkConfig", "ChunkResult", "InputFit",
           "chunk_budget", "chunk_document", "chunk_markdown", "count_tokens"]
"""The budget's names are re-exported: callers that chunk need one import."""

# Bump when a change alters the chunks produced for the same input and config,
# so document fingerprints that include it force a re-chunk.
CHUNKER_VERSION = "1"

# Characters counted as one token each (kbsync.text.cjk, Use.TOKEN); compiled on first use
# (kbsync.text.cjk.compiled).
_CJK = f"[{CJK_TOKEN_CHARS}]"
_TOKEN = f"[{CJK_TOKEN_CHARS}]|[^\\s{CJK_TOKEN_CHARS}]+"
_NONSPACE_RE = re.compile(r"\S")

# Separator levels, strongest first; a unit is cut at the end of each match.
_SEPARATORS = (
    re.compile(r"\n[ \t\r]*\n\s*"),  # blank line: paragraphs
    re.compile(r"\n\s*"),  # line break
    # Sentence ends; ASCII ones only before whitespace so "3.14" and "a.b" stay whole.
    re.compile(r"[。！？；]+[”’」』）]*\s*|[.!?;]+[\"')\]]*(?:\s+|$)"),
    re.compile(r"[，,]\s*"),  # clauses
    re.compile(r"\s+"),  # words
)
_SENTENCE_ENDERS = "。！？；.!?;"
_CLOSERS = "\"')]}”’」』）"

# ATX heading or code fence line, at most three spaces of indent (CommonMark).
_LINE_RE = re.compile(
    r"^ {0,3}(?:(?P<fence>`{3,}|~{3,})(?P<info>[^\n]*)"
    r"|(?P<hashes>#{1,6})(?:[ \t]+(?P<title>[^\n]*?))?(?:[ \t]+#+)?[ \t\r]*)$",
    re.MULTILINE,
)


def count_tokens(text: str) -> int:
    """Count tokens the way the budget is enforced.

    Each CJK character (ideographs incl. extension A and beyond, Hiragana,
    Katakana, Hangul, CJK punctuation, fullwidth forms) is one token; every
    other maximal run of non-whitespace, non-CJK characters is one token,
    however long (``"hello世界"`` is 3 tokens; a 5,000-character URL is 1).
    """
    if compiled(_CJK).search(text) is None:
        return len(text.split())  # fast path: str.split and \s agree on whitespace
    return len(compiled(_TOKEN).findall(text))


# Re-chunkings of one overflowing chunk before giving up; each cuts the budget to the
# chunk's share of the limit, so 1-2 are usual (measured on real HTML shares).
_FIT_ROUNDS = 6
_FIT_MARGIN = 0.9  # word pieces per chunker token vary within a chunk


@dataclass
class ChunkResult:
    """Chunks of one document and what was dropped.

    Invariants: ``kept == len(chunks) == len(spans)``; ``raw == kept + empty +
    duplicates``; ``chunks[i].chunk_index == i``; ``chunks[i].text ==
    markdown[spans[i][0]:spans[i][1]]``.
    """

    chunks: list[Chunk]
    raw: int
    kept: int
    spans: list[tuple[int, int]] = field(default_factory=list)
    empty: int = 0
    duplicates: int = 0


class _Piece(NamedTuple):
    """A raw chunk: its section number, heading path and stripped span."""

    section: int
    heading_path: str
    start: int
    end: int


_Units = list[tuple[int, int, int]]  # (start, end, tokens) of contiguous units


def chunk_document(doc: Document, config: ChunkConfig = ChunkConfig()) -> ChunkResult:
    """Chunk a converted document; see :func:`chunk_markdown`."""
    return chunk_markdown(
        doc.markdown, config, doc_id=doc.doc_id, page_offsets=doc.page_offsets,
        title=doc.title or "",
    )


def chunk_markdown(
    markdown: str,
    config: ChunkConfig = ChunkConfig(),
    *,
    doc_id: str = "",
    page_offsets: Sequence[int] = (),
    title: str = "",
) -> ChunkResult:
    """Split Markdown into heading-aware chunks within the token budget.

    Chunks that are empty after stripping whitespace are dropped, and so is a
    chunk whose whitespace-normalised text equals an earlier chunk's; both are
    counted. ``chunk_index`` runs 0..kept-1 over the kept chunks.

    Args:
        markdown: The document's Markdown.
        config: Token and character budget.
        doc_id: Copied into every chunk.
        page_offsets: Strictly increasing character offsets, the i-th being
            where page i + 1 starts; empty leaves page_start/page_end None.
            Text before the first offset counts as page 1.
        title: The document's title; only read by a contextual fit.

    Returns:
        The kept chunks, their spans in ``markdown`` and the counts.
    """
    pieces = _plan(markdown, config, title)
    chunks: list[Chunk] = []
    spans: list[tuple[int, int]] = []
    seen: set[str] = set()
    empty = duplicates = 0
    for piece in pieces:
        if piece.start == piece.end:
            empty += 1
            continue
        text = markdown[piece.start : piece.end]
        key = " ".join(text.split())
        if key in seen:
            duplicates += 1
            continue
        seen.add(key)
        page_start, page_end = _pages(page_offsets, piece.start, piece.end)
        chunks.append(
            Chunk(
                doc_id=doc_id,
                chunk_index=len(chunks),
                text=text,
                heading_path=piece.heading_path,
                page_start=page_start,
                page_end=page_end,
                token_count=count_tokens(text),
            )
        )
        spans.append((piece.start, piece.end))
    logger.debug(
        "chunked %s: %d raw, %d kept, %d empty, %d duplicate",
        doc_id, len(pieces), len(chunks), empty, duplicates,
    )
    return ChunkResult(chunks, len(pieces), len(chunks), spans, empty, duplicates)


def _plan(markdown: str, config: ChunkConfig, title: str = "") -> list[_Piece]:
    """All raw chunks in order, before empty and duplicate ones are dropped."""
    pieces: list[_Piece] = []
    for number, (path, start, end) in enumerate(_sections(markdown)):
        head = _fit_head(config, title, path)
        for cs, ce in _section_spans(markdown, start, end, config, head=head):
            pieces.append(_Piece(number, path, cs, ce))
    return pieces


def _fit_head(cfg: ChunkConfig, title: str, path: str) -> str:
    """What the embedder reads before a chunk of section ``path`` (counted by the fit)."""
    if cfg.fit is None or not cfg.contextual:
        return ""
    return contextual_text("", title=title, heading_path=path)


def _section_spans(md: str, s: int, e: int, cfg: ChunkConfig,
                   rounds: int = _FIT_ROUNDS, head: str = "") -> list[tuple[int, int]]:
    """Stripped chunk spans of md[s:e]. With a fit, a chunk longer than the model reads is
    replaced by its own part (without the overlap it took) chunked again, smaller.
    ``head`` (the contextual prefix) is counted in front of every chunk."""
    units: _Units = []
    _split(md, s, e, 0, cfg, units)
    spans = [_strip(md, cs, ce) for cs, ce in _pack(md, units, cfg)]
    if cfg.fit is None or rounds == 0 or (cfg.max_tokens == 1 and cfg.max_chars == 1):
        return spans
    out: list[tuple[int, int]] = []
    covered = s
    for (a, b), n in zip(spans, cfg.fit.count([head + md[a:b] for a, b in spans])):
        if n <= cfg.fit.limit:
            out.append((a, b))
        else:
            out.extend(_section_spans(md, max(a, covered), b, _shrunk(cfg, md[a:b], n),
                                      rounds - 1, head))
        covered = max(covered, b)
    return out


def _shrunk(cfg: ChunkConfig, text: str, pieces: int) -> ChunkConfig:
    """A budget under which ``text`` (``pieces`` model tokens) would fit; both bounds shrink
    strictly, so repeated shrinking ends at (1, 1)."""
    assert cfg.fit is not None  # only _section_spans calls it, under a fit
    ratio = _FIT_MARGIN * cfg.fit.limit / pieces
    tokens = max(1, min(cfg.max_tokens - 1, int(count_tokens(text) * ratio)))
    chars = max(1, min(cfg.max_chars - 1, int(len(text) * ratio)))
    return ChunkConfig(tokens, cfg.overlap * tokens // cfg.max_tokens, chars, cfg.fit,
                       cfg.contextual)


def _sections(md: str) -> list[tuple[str, int, int]]:
    """(heading_path, start, end) of each section; together they tile the text.

    A heading line belongs to its own section. A heading with no body before a
    deeper heading is merged into that child's section, so "# A" directly
    followed by "## B" yields one section with path "A > B". A whitespace-only
    preamble is no section at all.
    """
    heads: list[tuple[int, int, str, int]] = []  # start, level, title, line end
    fence: tuple[str, int] | None = None
    for m in _LINE_RE.finditer(md):
        marker = m.group("fence")
        if marker:
            if fence is None:
                fence = (marker[0], len(marker))
            elif marker[0] == fence[0] and len(marker) >= fence[1]:
                if not m.group("info").strip():  # a closing fence has no info string
                    fence = None
        elif fence is None:
            title = (m.group("title") or "").strip()
            heads.append((m.start(), len(m.group("hashes")), title, m.end()))

    sections: list[tuple[str, int, int]] = []
    first = heads[0][0] if heads else len(md)
    if _NONSPACE_RE.search(md, 0, first):
        sections.append(("", 0, first))
    stack: list[tuple[int, str]] = []
    pending: int | None = None
    for i, (start, level, title, line_end) in enumerate(heads):
        while stack and stack[-1][0] >= level:  # a shallower heading pops deeper ones
            stack.pop()
        stack.append((level, title))
        end = heads[i + 1][0] if i + 1 < len(heads) else len(md)
        begin = start if pending is None else pending
        has_body = _NONSPACE_RE.search(md, line_end, end) is not None
        if i + 1 < len(heads) and heads[i + 1][1] > level and not has_body:
            pending = begin
            continue
        pending = None
        sections.append((" > ".join(t for _, t in stack if t), begin, end))
    return sections


def _split(md: str, s: int, e: int, level: int, cfg: ChunkConfig, out: _Units) -> None:
    """Append (start, end, tokens) units tiling md[s:e], each within the budget."""
    if e - s <= cfg.max_chars:
        tokens = count_tokens(md[s:e])
        if tokens <= cfg.max_tokens:
            out.append((s, e, tokens))
            return
    if level == len(_SEPARATORS):
        _hard_cut(md, s, e, cfg, out)
        return
    cuts = [m.end() for m in _SEPARATORS[level].finditer(md, s, e)]
    cuts = [c for c in cuts if s < c < e]
    if not cuts:
        _split(md, s, e, level + 1, cfg, out)
        return
    for a, b in zip([s, *cuts], [*cuts, e]):
        _split(md, a, b, level + 1, cfg, out)


def _hard_cut(md: str, s: int, e: int, cfg: ChunkConfig, out: _Units) -> None:
    """Cut a span without separators (one word plus trailing whitespace) by characters.

    Cuts fall between tokens where possible (a CJK run), else inside a token
    (a single word longer than max_chars).
    """
    start, tokens = s, 0
    for m in compiled(_TOKEN).finditer(md, s, e):
        ts, te = m.span()
        if tokens and (tokens + 1 > cfg.max_tokens or te - start > cfg.max_chars):
            out.append((start, ts, tokens))
            start, tokens = ts, 0
        while te - start > cfg.max_chars:
            cut = start + cfg.max_chars
            out.append((start, cut, count_tokens(md[start:cut])))
            start = cut
        tokens += 1
    while e - start > cfg.max_chars:  # the last word plus long trailing whitespace
        cut = start + cfg.max_chars
        out.append((start, cut, count_tokens(md[start:cut])))
        start = cut
    if start < e:
        out.append((start, e, count_tokens(md[start:e])))


def _pack(md: str, units: _Units, cfg: ChunkConfig) -> list[tuple[int, int]]:
    """Greedily pack contiguous units into chunk spans of one section, adding overlap.

    Each chunk takes at least one unit, so packing always progresses. The
    overlap budget is shrunk so that overlap plus the first unit still fits.
    """
    spans: list[tuple[int, int]] = []
    i, n = 0, len(units)
    while i < n:
        us, ue, ut = units[i]
        start, tokens = us, 0
        if spans and cfg.overlap:
            budget = min(cfg.overlap, cfg.max_tokens - ut)
            start, tokens = _tail(md, spans[-1], budget, ue - cfg.max_chars, us)
        end = start
        while (
            i < n
            and tokens + units[i][2] <= cfg.max_tokens
            and units[i][1] - start <= cfg.max_chars
        ):
            tokens += units[i][2]
            end = units[i][1]
            i += 1
        if start < us and not _NONSPACE_RE.search(md, us, end):
            start = us  # only whitespace is new: no overlap, or the chunk would repeat prev
        spans.append((start, end))
    return spans


def _tail(
    md: str, prev: tuple[int, int], budget: int, min_start: int, default: int
) -> tuple[int, int]:
    """Start and token count of the overlap taken from the end of ``prev``.

    The overlap is a proper suffix of ``prev`` of at most ``budget`` tokens
    starting at a token and at or after ``min_start``. It starts at a sentence
    when that keeps at least half of the longest word-aligned candidate.
    """
    if budget <= 0:
        return default, 0
    # Tokenise only a window at the end of prev, widened until it holds budget + 2
    # tokens: then every candidate start and the token before it are whole tokens.
    width = 4 * (budget + 2)
    while True:
        window = max(prev[0], prev[1] - width)
        toks = [m.span() for m in compiled(_TOKEN).finditer(md, window, prev[1])]
        if window == prev[0] or len(toks) >= budget + 2:
            break
        width *= 4
    best_word = best_sentence = 0
    for k in range(1, min(budget, len(toks) - 1) + 1):
        t = len(toks) - k
        if toks[t][0] < min_start:
            break
        best_word = k
        prev_token = md[toks[t - 1][0] : toks[t - 1][1]].rstrip(_CLOSERS)
        gap_has_newline = "\n" in md[toks[t - 1][1] : toks[t][0]]
        if gap_has_newline or (prev_token and prev_token[-1] in _SENTENCE_ENDERS):
            best_sentence = k
    k = best_sentence if 2 * best_sentence >= best_word else best_word
    if k == 0:
        return default, 0
    return toks[-k][0], k


def _strip(md: str, s: int, e: int) -> tuple[int, int]:
    """The span without leading and trailing whitespace; (s, s) when blank."""
    m = _NONSPACE_RE.search(md, s, e)
    if m is None:
        return s, s
    start = m.start()
    return start, start + len(md[start:e].rstrip())


def _pages(offsets: Sequence[int], s: int, e: int) -> tuple[int | None, int | None]:
    """1-based first and last page of md[s:e]; (None, None) without offsets."""
    if not offsets:
        return None, None
    first = max(1, bisect_right(offsets, s))
    return first, max(first, bisect_right(offsets, e - 1))
