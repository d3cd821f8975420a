"""Unit tests of the Markdown chunker (kbsync.text.chunk): pure functions, no I/O."""

from __future__ import annotations

import random
import string
import time

import pytest

from kbsync.text.chunk import ChunkConfig, _plan, chunk_document, chunk_markdown, count_tokens
from kbsync.errors import UsageError
from kbsync.models import Document

NO_OVERLAP = ChunkConfig(max_tokens=10, overlap=0)


def texts(markdown: str, config: ChunkConfig = ChunkConfig()) -> list[str]:
    return [c.text for c in chunk_markdown(markdown, config).chunks]


# --- token counting -----------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("  \n\t ", 0),
        ("hello world", 2),
        ("hello世界", 3),
        ("世界。", 3),
        ("日本語のテキスト", 8),  # kanji, hiragana, katakana
        ("한국어 문장", 5),  # Hangul syllables
        ("ｆｕｌｌ", 4),  # fullwidth forms
        ("世\u3000界", 2),  # the ideographic space is whitespace, not a token
        ("\u3400\U00020000", 2),  # extension A and B ideographs
        ("https://example.com/" + "a" * 5000, 1),  # a huge word is one token
        ("a,b;c. d", 2),  # punctuation does not split words
        ("x世y", 3),
    ],
)
def test_count_tokens(text: str, expected: int) -> None:
    assert count_tokens(text) == expected


# --- configuration ------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_tokens": 0, "overlap": 0},
        {"max_tokens": 10, "overlap": 10},
        {"max_tokens": 10, "overlap": -1},
        {"max_tokens": 10, "overlap": 2, "max_chars": 0},
    ],
)
def test_config_rejects_bad_values(kwargs: dict) -> None:
    with pytest.raises(UsageError):
        ChunkConfig(**kwargs)


def test_config_defaults() -> None:
    assert ChunkConfig() == ChunkConfig(max_tokens=400, overlap=60, max_chars=4000)


# --- empty input ----------------------------------------------------------------
@pytest.mark.parametrize("markdown", ["", "   ", "\n\n\t\n"])
def test_empty_input_gives_no_chunks(markdown: str) -> None:
    result = chunk_markdown(markdown)
    assert (result.chunks, result.raw, result.kept) == ([], 0, 0)


# --- headings -----------------------------------------------------------------
def test_heading_paths_follow_the_stack() -> None:
    md = (
        "Preamble text.\n"
        "# A\nalpha\n"
        "## B\nbeta\n"
        "### C\ngamma\n"
        "## D\ndelta\n"  # a level-2 after a level-3 pops both
        "# E\nepsilon\n"
    )
    chunks = chunk_markdown(md).chunks
    assert [(c.heading_path, c.text) for c in chunks] == [
        ("", "Preamble text."),
        ("A", "# A\nalpha"),
        ("A > B", "## B\nbeta"),
        ("A > B > C", "### C\ngamma"),
        ("A > D", "## D\ndelta"),
        ("E", "# E\nepsilon"),
    ]


def test_skipped_heading_levels() -> None:
    md = "# A\na\n### C\nc\n## B\nb\n#### F\nf\n# G\ng"
    paths = [c.heading_path for c in chunk_markdown(md).chunks]
    assert paths == ["A", "A > C", "A > B", "A > B > F", "G"]


def test_heading_without_body_joins_its_first_child() -> None:
    chunks = chunk_markdown("# Title\n\n## Intro\nHello there.\n## Next\nMore.").chunks
    assert [(c.heading_path, c.text) for c in chunks] == [
        ("Title > Intro", "# Title\n\n## Intro\nHello there."),
        ("Title > Next", "## Next\nMore."),
    ]


def test_heading_only_section_before_a_sibling_is_kept() -> None:
    chunks = chunk_markdown("## A\n## B\nbody").chunks
    assert [(c.heading_path, c.text) for c in chunks] == [("A", "## A"), ("B", "## B\nbody")]


def test_hashes_in_code_fences_are_not_headings() -> None:
    md = (
        "# Setup\n"
        "```bash\n# install it\npip install x\n## not a heading\n```\n"
        "~~~~\n# still code\n~~~\n# also code: a shorter fence does not close\n~~~~\n"
        "after the fences\n"
        "## Usage\nrun it"
    )
    chunks = chunk_markdown(md).chunks
    assert [c.heading_path for c in chunks] == ["Setup", "Setup > Usage"]
    assert "# install it" in chunks[0].text and "after the fences" in chunks[0].text


def test_unclosed_fence_swallows_the_rest() -> None:
    chunks = chunk_markdown("# A\n```\n# B\ntext").chunks
    assert [c.heading_path for c in chunks] == ["A"]


@pytest.mark.parametrize(
    ("line", "path"),
    [
        ("## Closing hashes ##", "Closing hashes"),
        ("#   Spaced   ", "Spaced"),
        ("   # Three-space indent", "Three-space indent"),
        ("# C#", "C#"),
        ("#hashtag", ""),  # no space: not a heading
        ("####### seven", ""),  # more than six: not a heading
        ("    # indented code", ""),  # four spaces: code, not a heading
    ],
)
def test_atx_heading_syntax(line: str, path: str) -> None:
    chunks = chunk_markdown(f"{line}\nbody").chunks
    assert chunks[0].heading_path == path


def test_heading_words_stay_in_the_chunk_text() -> None:
    chunks = chunk_markdown("# Installation guide\nSteps follow.").chunks
    assert chunks[0].text.startswith("# Installation guide")


# --- splitting oversized paragraphs ---------------------------------------------
def test_paragraphs_are_packed_whole() -> None:
    md = "one two three four\n\nfive six seven\n\neight nine ten eleven"
    assert texts(md, NO_OVERLAP) == [
        "one two three four\n\nfive six seven",
        "eight nine ten eleven",
    ]


def test_line_breaks_before_sentences() -> None:
    md = "a b c. d e\nf g h. i j\nk l"
    assert texts(md, ChunkConfig(max_tokens=7, overlap=0)) == ["a b c. d e", "f g h. i j\nk l"]


def test_sentence_ends_keep_their_punctuation() -> None:
    md = "One two three. Four five six! Seven eight nine? Ten eleven twelve; thirteen."
    assert texts(md, NO_OVERLAP) == [
        "One two three. Four five six! Seven eight nine?",
        "Ten eleven twelve; thirteen.",
    ]


def test_ascii_period_inside_a_word_is_not_a_sentence_end() -> None:
    md = "version 3.14 is out " * 3 + "and e.g. works"
    chunks = texts(md, ChunkConfig(max_tokens=5, overlap=0))
    assert all(not c.endswith("3.") for c in chunks)


def test_cjk_sentences() -> None:
    md = "你好世界。今天天气很好！我们去公园吧？"
    assert texts(md, ChunkConfig(max_tokens=8, overlap=0)) == ["你好世界。", "今天天气很好！", "我们去公园吧？"]


def test_commas_after_sentences() -> None:
    md = "alpha beta gamma, delta epsilon zeta, eta theta iota, kappa lambda"
    assert texts(md, ChunkConfig(max_tokens=7, overlap=0)) == [
        "alpha beta gamma, delta epsilon zeta,",
        "eta theta iota, kappa lambda",
    ]


def test_cjk_commas() -> None:
    md = "一二三四，五六七八，九十"
    assert texts(md, ChunkConfig(max_tokens=6, overlap=0)) == ["一二三四，", "五六七八，", "九十"]


def test_spaces_after_commas() -> None:
    md = " ".join(f"w{i}" for i in range(25))
    chunks = texts(md, NO_OVERLAP)
    assert [len(c.split()) for c in chunks] == [10, 10, 5]
    assert " ".join(chunks) == md


def test_characters_last() -> None:
    md = "天地玄黄宇宙洪荒日月盈昃辰宿列张寒来暑往秋收冬藏闰余成"[:25]  # no punctuation
    assert len(md) == 25
    assert [len(c) for c in texts(md, NO_OVERLAP)] == [10, 10, 5]


def test_huge_word_is_cut_at_max_chars() -> None:
    rng = random.Random(1)
    word = "https://x.org/" + "".join(rng.choice(string.ascii_letters) for _ in range(9986))
    result = chunk_markdown(f"see {word} now", ChunkConfig(max_chars=4000))
    # "see" cannot join the first 4,000-character piece without passing max_chars
    assert [len(c.text) for c in result.chunks] == [3, 4000, 4000, 2004]
    assert "".join(c.text for c in result.chunks[1:]) == f"{word} now"
    assert all(c.token_count <= 3 for c in result.chunks)


def test_megabyte_single_word_line() -> None:
    rng = random.Random(2)
    word = "".join(rng.choices(string.ascii_letters, k=1_000_000))
    result = chunk_markdown(word)
    assert max(len(c.text) for c in result.chunks) <= 4000
    assert "".join(c.text for c in result.chunks) == word


# --- overlap ----------------------------------------------------------------------
def test_overlap_starts_at_a_sentence_and_stays_within_budget() -> None:
    md = " ".join(f"Sentence number {i} is here." for i in range(20))
    config = ChunkConfig(max_tokens=30, overlap=10)
    result = chunk_markdown(md, config)
    assert len(result.chunks) > 2
    for (ps, pe), (ns, _ne), chunk in zip(result.spans, result.spans[1:], result.chunks[1:]):
        assert ns < pe, "consecutive chunks of a section overlap"
        shared = md[ns:pe]
        assert 0 < count_tokens(shared) <= 10
        assert chunk.text.startswith("Sentence number")
        assert chunk.token_count <= 30


def test_overlap_falls_back_to_words() -> None:
    md = " ".join(f"w{i}" for i in range(100))
    result = chunk_markdown(md, ChunkConfig(max_tokens=20, overlap=5))
    for (_, pe), (ns, _) in zip(result.spans, result.spans[1:]):
        assert count_tokens(md[ns:pe]) == 5
    assert all(c.token_count == 20 for c in result.chunks[:-1])


def test_no_overlap_when_zero() -> None:
    md = " ".join(f"w{i}" for i in range(100))
    result = chunk_markdown(md, ChunkConfig(max_tokens=20, overlap=0))
    assert " ".join(c.text for c in result.chunks) == md


def test_overlap_does_not_cross_sections() -> None:
    body = " ".join(f"w{i}" for i in range(30))
    md = f"# A\n{body}\n# B\n{body.upper()}"
    result = chunk_markdown(md, ChunkConfig(max_tokens=12, overlap=4))
    first_b = next(i for i, c in enumerate(result.chunks) if c.heading_path == "B")
    assert result.spans[first_b - 1][1] <= result.spans[first_b][0]
    assert result.chunks[first_b].text.startswith("# B")


# --- pages ------------------------------------------------------------------------
def test_page_ranges_from_offsets() -> None:
    pages = ["page one text\n\n", "page two text\n\n", "page three text"]
    md = "".join(pages)
    offsets = [0, len(pages[0]), len(pages[0]) + len(pages[1])]
    whole = chunk_markdown(md, page_offsets=offsets).chunks
    assert [(c.page_start, c.page_end) for c in whole] == [(1, 3)]
    small = chunk_markdown(md, ChunkConfig(max_tokens=3, overlap=0), page_offsets=offsets).chunks
    assert [(c.page_start, c.page_end) for c in small] == [(1, 1), (2, 2), (3, 3)]
    pairs = chunk_markdown(md, ChunkConfig(max_tokens=6, overlap=0), page_offsets=offsets).chunks
    assert [(c.page_start, c.page_end) for c in pairs] == [(1, 2), (3, 3)]


def test_no_offsets_means_no_pages() -> None:
    chunk = chunk_markdown("text").chunks[0]
    assert (chunk.page_start, chunk.page_end) == (None, None)


def test_chunk_document_uses_doc_fields() -> None:
    doc = Document(
        doc_id="root/a.pdf", path="/x/a.pdf", markdown="# T\nfirst page\n\nsecond page",
        title="a", source_type="pdf", converter="test", page_offsets=[0, 16],
    )
    result = chunk_document(doc, ChunkConfig(max_tokens=4, overlap=0))
    assert [(c.doc_id, c.chunk_index, c.page_start, c.page_end) for c in result.chunks] == [
        ("root/a.pdf", 0, 1, 1),
        ("root/a.pdf", 1, 2, 2),
    ]


# --- dropping -----------------------------------------------------------------------
def test_duplicates_are_dropped_and_counted() -> None:
    md = "foo bar baz\n\nfoo  bar\nbaz\n\nqux quux corge"
    result = chunk_markdown(md, ChunkConfig(max_tokens=3, overlap=0))
    assert [c.text for c in result.chunks] == ["foo bar baz", "qux quux corge"]
    assert (result.raw, result.kept, result.duplicates, result.empty) == (3, 2, 1, 0)
    assert [c.chunk_index for c in result.chunks] == [0, 1]


def test_whitespace_only_chunks_are_dropped_and_counted() -> None:
    md = "word" + " " * 50 + "\n\n" + "\t" * 50 + "\n\nend"
    result = chunk_markdown(md, ChunkConfig(max_tokens=10, overlap=0, max_chars=20))
    assert [c.text for c in result.chunks] == ["word", "end"]
    assert result.empty > 0 and result.raw == result.kept + result.empty + result.duplicates


def test_spans_match_texts_and_token_counts() -> None:
    md = "# H\n" + " ".join(f"word{i}." for i in range(500))
    result = chunk_markdown(md, ChunkConfig(max_tokens=50, overlap=10))
    for chunk, (s, e) in zip(result.chunks, result.spans):
        assert chunk.text == md[s:e]
        assert chunk.token_count == count_tokens(chunk.text) <= 50


def test_plan_is_deterministic() -> None:
    md = "# A\n" + "字" * 1000 + "\n\n" + "x " * 1000
    config = ChunkConfig(max_tokens=40, overlap=7)
    assert _plan(md, config) == _plan(md, config)


# --- performance ----------------------------------------------------------------------
def test_megabyte_document_chunks_quickly() -> None:
    rng = random.Random(0)
    letters = string.ascii_lowercase
    words = ["".join(rng.choices(letters, k=rng.randint(2, 10))) for _ in range(2000)]
    parts: list[str] = []
    while sum(map(len, parts)) < 1_000_000:
        if rng.random() < 0.1:
            parts.append("#" * rng.randint(1, 4) + " " + " ".join(rng.choices(words, k=3)))
        else:
            count = rng.randint(1, 8)
            sentences = (" ".join(rng.choices(words, k=rng.randint(5, 25))) + "." for _ in range(count))
            parts.append(" ".join(sentences))
    md = "\n\n".join(parts)
    offsets = list(range(0, len(md), len(md) // 300))
    started = time.perf_counter()
    result = chunk_markdown(md, page_offsets=offsets)
    elapsed = time.perf_counter() - started
    assert result.kept > 300
    assert elapsed < 5.0, f"1 MB took {elapsed:.2f} s"  # ~0.1 s on one core; margin for slow CI
