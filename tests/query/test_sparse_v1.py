"""The legacy bm25-v1 encoder (kept for collections built with it): tokenisation, hashing, weights."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbsync.text.sparse_v1 import (
    AVG_LEN,
    DEFAULT,
    K1,
    SparseConfig,
    encode_document,
    encode_query,
    s_stem,
    token_index,
    tokenize,
)


def test_english_lowercase_stop_words_and_plurals() -> None:
    text = "The Policies of the billing team: invoices are sent to customers."
    assert tokenize(text) == ["policy", "billing", "team", "invoice", "sent", "customer"]
    raw = SparseConfig(stem=False, stop_words=False)
    assert tokenize(text, raw) == ["the", "policies", "of", "the", "billing", "team", "invoices",
                                   "are", "sent", "to", "customers"]


@pytest.mark.parametrize(("word", "stem"), [
    ("policies", "policy"), ("queries", "query"), ("invoices", "invoice"), ("keys", "key"),
    ("status", "status"), ("class", "class"), ("bus", "bus"), ("gas", "gas"), ("v2s", "v2s"),
    # Harman's rules as written, quirks included: only the first applicable rule runs.
    ("goes", "goe"), ("agrees", "agree"), ("ties", "ty"),
])
def test_s_stemmer(word: str, stem: str) -> None:
    assert s_stem(word) == stem


def test_identifiers_stay_whole_and_give_their_parts() -> None:
    assert tokenize("Upload failed with ERR_7Q4Z (see __init__ and max_retry_count).") == [
        "upload", "failed", "err_7q4z", "err", "7q4z", "see", "init", "max_retry_count", "max",
        "retry", "count"]
    assert tokenize("ERR-7Q4Z v1.2.3") == ["err", "7q4z", "v1", "2", "3"]


def test_nfkc_folds_full_width_forms() -> None:
    assert tokenize("ＥＲＲ＿７Ｑ４Ｚ") == tokenize("ERR_7Q4Z")


def test_cjk_bigrams_and_single_character_unigrams() -> None:
    assert tokenize("数据库索引") == ["数据", "据库", "库索", "索引"]
    assert tokenize("库") == ["库"]
    # Runs are split by punctuation, spaces and Latin words: each run on its own.
    assert tokenize("密钥轮换，使用 keyctl 工具。库") == ["密钥", "钥轮", "轮换", "使用", "keyctl",
                                                  "工具", "库"]
    assert tokenize("ひらがなカタカナ") == ["ひら", "らが", "がな", "なカ", "カタ", "タカ", "カナ"]
    assert tokenize("한국어") == ["한국", "국어"]


def test_long_tokens_are_dropped() -> None:
    blob = "a" * 65
    assert tokenize(f"x {blob} y") == ["x", "y"]
    assert tokenize("h" * 64) == ["h" * 64]


def test_token_index_is_stable_31_bit() -> None:
    # Fixed values: a change here changes every stored vector (bump SPARSE_VERSION).
    assert token_index("err_7q4z") == token_index("err_7q4z")
    assert [token_index(t) for t in ("policy", "数据")] == [2085079531, 518812448]
    assert all(0 <= token_index(f"t{i}") < 2**31 for i in range(1000))


def _colliding_pair() -> tuple[str, str]:
    """Two distinct terms with the same index (birthday search over 31 bits)."""
    seen: dict[int, str] = {}
    for i in itertools.count():
        term = f"w{i}"
        index = token_index(term)
        if index in seen:
            return seen[index], term
        seen[index] = term
    raise AssertionError("unreachable")


def test_colliding_terms_merge_into_one_index() -> None:
    first, second = _colliding_pair()
    doc = encode_document(f"{first} {second} {second}")
    assert doc.indices == [token_index(first)]
    single = encode_document(f"{first} {second} {second}").values[0]
    norm = K1 * (1 - DEFAULT.b + DEFAULT.b * 3 / AVG_LEN)
    assert single == pytest.approx(1 * (K1 + 1) / (1 + norm) + 2 * (K1 + 1) / (2 + norm))
    assert encode_query(f"{first} {second}").values == [1.0]


def test_document_weights_are_bm25_term_frequencies() -> None:
    doc = encode_document("alpha beta beta gamma gamma gamma")
    norm = K1 * (1 - DEFAULT.b + DEFAULT.b * 6 / AVG_LEN)
    expected = {token_index(t): tf * (K1 + 1) / (tf + norm)
                for t, tf in (("alpha", 1), ("beta", 2), ("gamma", 3))}
    assert dict(zip(doc.indices, doc.values)) == pytest.approx(expected)
    assert doc.indices == sorted(doc.indices)


# Saturation, length normalisation, empty texts and bad parameters: tests/query/test_sparse.py
# runs those for both schemes.


def test_query_side_is_one_per_unique_term() -> None:
    q = encode_query("Rotate the key, rotate the KEYS now")
    assert sorted(q.indices) == q.indices
    assert q.values == [1.0] * 3
    assert set(q.indices) == {token_index(t) for t in ("rotate", "key", "now")}


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=300))
def test_any_text_gives_a_valid_vector(text: str) -> None:
    doc, query = encode_document(text), encode_query(text)
    for vec in (doc, query):
        assert len(vec.indices) == len(set(vec.indices)) == len(vec.values)
        assert vec.indices == sorted(vec.indices)
        assert all(0 <= i < 2**31 for i in vec.indices)
        assert all(math.isfinite(v) and 0 < v for v in vec.values)
    assert all(v < K1 + 1 for v in doc.values) or len(doc.indices) < len(tokenize(text))
    assert set(doc.indices) == set(query.indices)
