"""Hypothesis properties of the chunker (kbsync.text.chunk).

1. Coverage: reading the raw chunks in order and skipping what overlaps the
   previous chunk reproduces every non-whitespace character of the input, in
   order; dropping keeps every text (a dropped duplicate's text is kept).
2. Budget: no chunk has more than max_tokens tokens or max_chars characters.
3. Overlap: consecutive chunks of a section share at most ``overlap`` tokens;
   chunks of different sections share nothing.
"""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbsync.text.chunk import ChunkConfig, _plan, chunk_markdown, count_tokens

WORDS = ["alpha", "beta", "gamma", "delta", "x", "URL", "3.14", "e.g.", "foo_bar", "naïve", "C#"]
CJK = (
    "的一是不了人我在有他这中大来上国个到说们为子和地出道也时年得就那要下以生会自可天"
    "日本語テキストのひらがな한국어문장ｆｕｌｌ"
)
PUNCT = list(".,;!?:-()`*[]") + list("。，！？；：「」")
SPACES = [" ", " ", "  ", "\n", "\n\n", "\t", "\u3000", "\n\n\n", " \n \n"]

atoms = st.one_of(
    st.sampled_from(WORDS).map(lambda w: w + " "),
    st.sampled_from(WORDS),
    st.text(alphabet=CJK, min_size=1, max_size=40),
    st.sampled_from(PUNCT),
    st.sampled_from(SPACES),
    st.builds(
        lambda n, w: f"\n{'#' * n} {w}\n", st.integers(1, 7), st.sampled_from([*WORDS, "标题"])
    ),
    st.sampled_from(["\n```\n", "\n~~~\n", "\n```python\n"]),
    st.text(alphabet="abcxyz/:.?=", min_size=30, max_size=400),  # URL-like long words
    st.text(min_size=1, max_size=4),  # arbitrary Unicode
)
markdowns = st.lists(atoms, max_size=150).map("".join)


@st.composite
def configs(draw: st.DrawFn) -> ChunkConfig:
    max_tokens = draw(st.integers(16, 200))
    overlap = draw(st.integers(0, max_tokens // 2))
    max_chars = draw(st.sampled_from([40, 120, 500, 4000]))
    return ChunkConfig(max_tokens=max_tokens, overlap=overlap, max_chars=max_chars)


PROPS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def non_space(text: str) -> str:
    return re.sub(r"\s+", "", text)


@PROPS
@given(markdown=markdowns, config=configs())
def test_coverage_budget_and_overlap(markdown: str, config: ChunkConfig) -> None:
    check_invariants(markdown, config)


def check_invariants(markdown: str, config: ChunkConfig) -> None:
    """Properties 1-3 and the dropping counts for one input (shared with test_chunk_fit)."""
    pieces = _plan(markdown, config)

    # Coverage, in order, and the budget on every raw chunk.
    rebuilt: list[str] = []
    covered = 0
    for piece in pieces:
        text = markdown[piece.start : piece.end]
        assert text == text.strip()
        assert count_tokens(text) <= config.max_tokens
        assert len(text) <= config.max_chars
        if piece.start == piece.end:
            continue
        assert piece.end > covered, "a chunk lies wholly inside earlier ones"
        rebuilt.append(markdown[max(piece.start, covered) : piece.end])
        covered = piece.end
    assert non_space("".join(rebuilt)) == non_space(markdown)

    # Overlap between consecutive chunks.
    for prev, cur in zip(pieces, pieces[1:]):
        if cur.start < prev.end:
            assert cur.section == prev.section, "overlap crossed a heading section"
            assert count_tokens(markdown[cur.start : prev.end]) <= config.overlap
        if cur.section != prev.section:
            assert cur.start >= prev.end

    # Dropping: counts add up, indices are contiguous, no text is lost.
    result = chunk_markdown(markdown, config)
    assert result.raw == len(pieces) == result.kept + result.empty + result.duplicates
    assert [c.chunk_index for c in result.chunks] == list(range(result.kept))
    kept = {" ".join(c.text.split()) for c in result.chunks}
    assert len(kept) == result.kept
    for piece in pieces:
        if piece.start < piece.end:
            assert " ".join(markdown[piece.start : piece.end].split()) in kept
    for chunk, (s, e) in zip(result.chunks, result.spans):
        assert chunk.text == markdown[s:e]
        assert chunk.token_count == count_tokens(chunk.text) <= config.max_tokens


@settings(max_examples=100, deadline=None)
@given(markdown=markdowns, data=st.data())
def test_pages_follow_offsets(markdown: str, data: st.DataObject) -> None:
    positions = data.draw(st.sets(st.integers(1, max(1, len(markdown) - 1)), max_size=10))
    offsets = [0, *sorted(p for p in positions if p < len(markdown))]
    result = chunk_markdown(markdown, ChunkConfig(max_tokens=16, overlap=4), page_offsets=offsets)
    for chunk, (s, e) in zip(result.chunks, result.spans):
        assert 1 <= chunk.page_start <= chunk.page_end <= len(offsets)
        assert offsets[chunk.page_start - 1] <= s
        assert chunk.page_start == len(offsets) or s < offsets[chunk.page_start]
        assert offsets[chunk.page_end - 1] <= e - 1
        assert chunk.page_end == len(offsets) or e - 1 < offsets[chunk.page_end]


@settings(max_examples=200, deadline=None)
@given(a=st.text(), b=st.text())
def test_token_count_is_subadditive(a: str, b: str) -> None:
    """The packer adds unit counts; that is safe only because of this."""
    assert count_tokens(a + b) <= count_tokens(a) + count_tokens(b)
    assert count_tokens(a) <= len(a)
