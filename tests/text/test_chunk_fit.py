"""Chunks fitted to an embedding model's input limit (ChunkConfig.fit).

The fit re-plans a section with a smaller budget while one of its chunks is
longer than the model reads. The properties of tests/text/test_chunk_properties.py
must still hold; a deterministic stand-in tokenizer (word pieces of at most four
characters) drives the Hypothesis test, and the real all-MiniLM-L6-v2 tokenizer
the test on real English and Chinese text.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kbsync.text.chunk import ChunkConfig, chunk_markdown, count_tokens
from kbsync.convert import convert
from tests.text.test_chunk_properties import PROPS, check_invariants, markdowns

_WORD = re.compile(r"\w+|[^\w\s]", re.UNICODE)


class FourCharPieces:
    """A word-piece-like count: [CLS] + [SEP], then ceil(len/4) per word or symbol."""

    def __init__(self, limit: int) -> None:
        self.name, self.limit, self.calls = f"four-char/{limit}", limit, 0

    def count(self, texts):
        self.calls += 1
        return [2 + sum(-(-len(w) // 4) for w in _WORD.findall(t)) for t in texts]


@PROPS
@given(markdown=markdowns, limit=st.integers(12, 120), tokens=st.integers(16, 200))
def test_fit_keeps_the_invariants_and_every_chunk_fits(markdown: str, limit: int, tokens: int) -> None:
    fit = FourCharPieces(limit)
    config = ChunkConfig(max_tokens=tokens, overlap=tokens // 6, max_chars=4000, fit=fit)
    check_invariants(markdown, config)
    chunks = chunk_markdown(markdown, config).chunks
    assert all(n <= limit for n in fit.count([c.text for c in chunks]))


def test_fit_leaves_sections_that_fit_alone() -> None:
    markdown = "# A\n\n" + "short words here. " * 20 + "\n\n# B\n\n" + "anotherlongishword " * 300
    plain = ChunkConfig(max_tokens=100, overlap=10)
    fitted = ChunkConfig(max_tokens=100, overlap=10, fit=FourCharPieces(200))
    a_plain = [c for c in chunk_markdown(markdown, plain).chunks if c.heading_path == "A"]
    a_fit = [c for c in chunk_markdown(markdown, fitted).chunks if c.heading_path == "A"]
    assert [c.text for c in a_plain] == [c.text for c in a_fit]  # section A fits as planned
    b_fit = [c for c in chunk_markdown(markdown, fitted).chunks if c.heading_path == "B"]
    assert all(FourCharPieces(200).count([c.text])[0] <= 200 for c in b_fit)
    assert ChunkConfig(100, 10) == fitted  # the fit is not part of the config's identity


def real_text() -> str:
    """English prose, commands and Chinese from the sample share, as long sections.

    Heading lines are dropped so that each file becomes one long section, the
    shape of real pages that overflowed the model.
    """
    root = Path(__file__).resolve().parents[2] / "data" / "sample"
    parts = []
    for name in ("handbook/onboarding.md", "engineering/deployment.md", "zh/faq.md",
                 "zh/ops-runbook.txt", "product/release-notes.txt"):
        text = convert(root / name, doc_id=name).markdown
        body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
        parts.append(f"# {name}\n\n{body}")
    return "\n\n".join(parts)


@pytest.mark.slow
def test_minilm_fit_cuts_nothing_on_real_text() -> None:
    from kbsync.embed.local import LocalEmbedder

    fit = LocalEmbedder("all-MiniLM-L6-v2").input_fit()
    markdown = real_text()
    texts = [c.text for c in chunk_markdown(markdown, ChunkConfig(254, 38, fit=fit)).chunks]
    assert max(fit.count(texts)) <= fit.limit == 256
    unfitted = [c.text for c in chunk_markdown(markdown, ChunkConfig(254, 38)).chunks]
    assert max(fit.count(unfitted)) > 256  # without the fit the same budget overflows
    assert max(count_tokens(t) for t in texts) <= 254
