"""BM25 sparse vectors (Qdrant's BM25 model): which texts match, and the weights."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbsync.errors import UsageError
from kbsync.text import sparse, sparse_v1
from kbsync.text.sparse import (
    AVG_LEN,
    CURRENT,
    DEFAULT,
    K1,
    LEGACY,
    SPARSE_VERSION,
    SparseConfig,
    encode_document,
    encode_query,
    encoder_for,
)


def terms(text: str) -> set[int]:
    return set(encode_query(text).indices)


def test_english_stop_words_and_stems_match_across_forms() -> None:
    assert terms("The Policies of the billing team") == terms("policy bill teams")
    assert terms("running") == terms("runs")
    assert terms("the of and to") == set()


def test_identifiers_match_by_their_parts() -> None:
    assert terms("ERR_7Q4Z") == terms("err 7q4z") != set()
    assert terms("rotate_api_keys.py") >= terms("rotate key")


@pytest.mark.parametrize(("document", "query"), [
    ("如何配置防火墙规则", "防火墙"),
    ("数据库索引的维护", "数据库"),
    ("ファイルを削除する", "削除"),
    ("파일 삭제", "삭제"),
])
def test_cjk_words_are_segmented_so_a_word_matches(document: str, query: str) -> None:
    assert terms(query) and terms(query) <= set(encode_document(document).indices)


def test_cjk_unrelated_words_do_not_match() -> None:
    assert not terms("防火墙") & set(encode_document("数据库索引的维护").indices)


def test_long_tokens_are_dropped() -> None:
    assert terms("a" * 65) == set()
    assert terms("h" * 60)


def test_document_weights_are_bm25_term_frequencies() -> None:
    doc = encode_document("alpha beta beta gamma gamma gamma")
    norm = K1 * (1 - DEFAULT.b + DEFAULT.b * 6 / AVG_LEN)
    expected = sorted(tf * (K1 + 1) / (tf + norm) for tf in (1, 2, 3))
    assert sorted(doc.values) == pytest.approx(expected, rel=1e-5)
    assert doc.indices == sorted(doc.indices)
    weight = dict(zip(doc.indices, doc.values))
    (gamma,) = terms("gamma")
    assert weight[gamma] == pytest.approx(expected[2], rel=1e-5)


# Both schemes (this one and the bm25-v1 that older collections keep) share these rules.
SCHEMES = [pytest.param(sparse, id="current"), pytest.param(sparse_v1, id="bm25-v1")]


@pytest.mark.parametrize("scheme", SCHEMES)
def test_saturation_and_length_normalisation(scheme) -> None:
    (alpha,) = scheme.encode_query("alpha").indices

    def weight(text: str, config: SparseConfig = scheme.DEFAULT) -> float:
        vec = scheme.encode_document(text, config)
        return dict(zip(vec.indices, vec.values))[alpha]

    once, ten, hundred = (weight(" ".join(["alpha"] * n)) for n in (1, 10, 100))
    assert once < ten < hundred < K1 + 1  # grows, but saturates below k1 + 1
    short_text = "alpha beta"
    long_text = "alpha " + " ".join(f"filler{i}" for i in range(300))
    assert weight(long_text) < weight(short_text)  # one mention counts less in a long chunk
    flat = scheme.SparseConfig(b=0.0)  # no length normalisation
    assert weight(long_text, flat) == pytest.approx(weight(short_text, flat))


def test_query_side_is_one_per_unique_term() -> None:
    q = encode_query("Rotate the key, rotate the KEYS daily")
    assert q.indices == sorted(q.indices)
    assert q.values == [1.0] * 3
    assert set(q.indices) == terms("rotate") | terms("key") | terms("daily")


@pytest.mark.parametrize("scheme", SCHEMES)
def test_texts_without_terms_give_empty_vectors(scheme) -> None:
    for text in ("", "   ", "the of and", "!!! --- ###"):
        assert scheme.encode_document(text).indices == []
        assert scheme.encode_query(text).indices == []


@pytest.mark.parametrize("scheme", SCHEMES)
def test_bad_config_refused(scheme) -> None:
    for kwargs in ({"k1": -1.0}, {"b": 1.5}, {"avg_len": 0.0}):
        with pytest.raises(ValueError):
            scheme.SparseConfig(**kwargs)


@pytest.mark.parametrize(("text", "indices"), [
    ("Rotating the API keys of the billing services",
     [195839524, 493065660, 1188412670, 1342301861, 2025758272]),
    ("如何配置防火墙规则", [507257442, 822751279, 1450544414, 1707277760, 2129755212]),
])
def test_exact_vectors_are_pinned(text: str, indices: list[int]) -> None:
    # Collections hold these vectors: if a qdrant-edge-py upgrade changes a hash or the
    # segmentation, this fails; then the scheme needs a new SPARSE_VERSION (and encoder).
    vec = encode_document(text)
    assert vec.indices == indices
    assert vec.values == pytest.approx([1.582734] * 5, rel=1e-6)


def test_each_recorded_version_keeps_its_encoder() -> None:
    assert encoder_for(SPARSE_VERSION) is CURRENT
    assert encoder_for(sparse_v1.SPARSE_VERSION) is LEGACY
    text = "policies ERR_7Q4Z"
    assert LEGACY.encode_document(text) == sparse_v1.encode_document(text)
    assert LEGACY.encode_document(text) != CURRENT.encode_document(text)
    with pytest.raises(UsageError, match="does not know"):
        encoder_for("bm25-v9")


def test_deterministic_across_calls() -> None:
    text = "Configure the firewall: 配置防火墙 rules ERR_7Q4Z"
    assert encode_document(text) == encode_document(text)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=300))
def test_any_text_gives_a_valid_vector(text: str) -> None:
    doc, query = encode_document(text), encode_query(text)
    for vec in (doc, query):
        assert len(vec.indices) == len(set(vec.indices)) == len(vec.values)
        assert vec.indices == sorted(vec.indices)
        assert all(0 <= i < 2**32 for i in vec.indices)
        assert all(math.isfinite(v) and 0 < v for v in vec.values)
    assert all(v < K1 + 1 for v in doc.values)
    assert set(doc.indices) == set(query.indices)
