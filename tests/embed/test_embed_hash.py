"""HashEmbedder: deterministic, unit-norm, CJK-aware feature hashing."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from kbsync.embed.base import EmbeddingProvider, TextKind
from kbsync.embed.hash import HashEmbedder, tokenize


def _cos(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b))


def test_is_a_provider_with_model_name_and_dimension() -> None:
    embedder = HashEmbedder(64)
    assert isinstance(embedder, EmbeddingProvider)
    assert (embedder.provider, embedder.model, embedder.dimension) == ("hash", "hash-64", 64)
    assert HashEmbedder().dimension == 384


def test_deterministic_within_and_across_processes() -> None:
    text = "Deterministic vectors, 北京欢迎你"
    here = HashEmbedder(32).embed_one(text)
    assert here == HashEmbedder(32).embed_one(text)
    code = (
        "from kbsync.embed.hash import HashEmbedder; "
        f"print(repr(HashEmbedder(32).embed_one({text!r})))"
    )
    # A different PYTHONHASHSEED proves the hashing does not use hash().
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "12345", "PATH": ""})
    assert eval(out.stdout) == here  # noqa: S307 - repr of a list of floats from our own subprocess


@pytest.mark.parametrize("text", ["", "   \n\t", "hello", "Hello, hello HELLO world", "。！？", "数据"])
def test_every_vector_has_unit_norm(text: str) -> None:
    vector = HashEmbedder(16).embed_one(text)
    assert len(vector) == 16
    assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, rel_tol=1e-9)


def test_empty_texts_share_one_nonzero_vector() -> None:
    embedder = HashEmbedder(16)
    assert embedder.embed_one("") == embedder.embed_one("  \n ") == embedder.embed_one("!!!")
    assert any(embedder.embed_one(""))


def test_tokenize_words_lowercase_and_cjk_unigrams_bigrams() -> None:
    assert tokenize("Hello, World_42!") == ["hello", "world", "42"]
    assert tokenize("北京大学") == ["北", "京", "大", "学", "北京", "京大", "大学"]
    assert tokenize("Qdrant 向量库 fast") == ["qdrant", "向", "量", "库", "向量", "量库", "fast"]


def test_similarity_follows_shared_terms() -> None:
    embedder = HashEmbedder(384)
    query, near, far = embedder.embed_batch(
        ["vector database search", "a fast vector database for search", "cooking pasta at home"]
    )
    assert _cos(query, near) > 0.5 > _cos(query, far)
    zq, znear, zfar = embedder.embed_batch(["北京的天气", "今天北京天气晴朗", "我喜欢吃苹果"], TextKind.QUERY)
    assert _cos(zq, znear) > _cos(zq, zfar)


def test_rejects_bad_dimension() -> None:
    with pytest.raises(ValueError):
        HashEmbedder(0)
