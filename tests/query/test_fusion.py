"""Weighted distribution-based score fusion (kbsync.query.fusion)."""

from __future__ import annotations

import pytest

from kbsync.text.sparse import SPARSE_VERSION
from kbsync.query.fusion import (DENSE_WEIGHT_BLIND, DENSE_WEIGHT_READS, Fusion, fuse, fusion_for,
                           is_cjk_query)
from kbsync.store.base import ScoredPoint


def points(*scored: tuple[str, float]) -> list[ScoredPoint]:
    return [ScoredPoint(pid, score, {"doc_id": pid}) for pid, score in scored]


@pytest.mark.parametrize("text, cjk", [
    ("how do I rotate keys", False), ("显示机器的体系结构（等价于 uname -m）", True),
    ("列出目录内容", True), ("what does 常见 mean in this page", False), ("1234 ???", False),
])
def test_cjk_queries_are_told_apart(text, cjk):
    assert is_cjk_query(text) is cjk


@pytest.mark.parametrize("provider, model, query, weight", [
    ("local", "all-MiniLM-L6-v2", "how do I rotate keys", DENSE_WEIGHT_READS),
    ("local", "all-MiniLM-L6-v2", "列出目录内容", DENSE_WEIGHT_BLIND),  # English-only model
    ("local", "all-MiniLM-L6-v2-int8", "列出目录内容", DENSE_WEIGHT_BLIND),  # the default
    ("local", "multilingual-e5-small", "列出目录内容", DENSE_WEIGHT_READS),
    ("hash", "hash-384", "how do I rotate keys", DENSE_WEIGHT_BLIND),  # lexical dense side
    ("openai", "text-embedding-3-small", "列出目录内容", DENSE_WEIGHT_READS),
])
def test_the_dense_weight_follows_what_the_model_can_read(provider, model, query, weight):
    assert fusion_for(query, provider=provider, model=model).dense_weight == weight


def test_a_point_both_sides_like_beats_one_only_one_side_likes():
    dense = points(("a", 0.9), ("b", 0.8), ("c", 0.2), ("d", 0.1))
    sparse = points(("b", 12.0), ("e", 11.0), ("a", 1.0), ("f", 0.5))
    fused = fuse(dense, sparse, Fusion(0.5), limit=10)
    assert fused[0].id == "b"
    assert {p.id for p in fused} == {"a", "b", "c", "d", "e", "f"}
    assert [p.score for p in fused] == sorted((p.score for p in fused), reverse=True)


def test_scores_are_normalised_per_list_so_bm25_scale_does_not_dominate():
    dense = points(("a", 0.91), ("b", 0.90), ("c", 0.10))
    sparse_small = points(("c", 2.0), ("b", 1.0), ("a", 0.9))
    sparse_large = points(("c", 2000.0), ("b", 1000.0), ("a", 900.0))
    small = fuse(dense, sparse_small, Fusion(0.7), limit=3)
    large = fuse(dense, sparse_large, Fusion(0.7), limit=3)
    assert [p.id for p in small] == [p.id for p in large]
    assert [round(p.score, 9) for p in small] == [round(p.score, 9) for p in large]


def test_an_empty_side_keeps_the_other_sides_order_and_the_limit_holds():
    dense = points(("a", 0.5), ("b", 0.5), ("c", 0.4))  # a tie keeps the list order
    assert [p.id for p in fuse(dense, [], Fusion(0.3), limit=2)] == ["a", "b"]
    assert fuse([], [], Fusion(0.7), limit=5) == []
    assert [p.id for p in fuse(points(("x", 3.0)), [], Fusion(0.7), limit=5)] == ["x"]


def test_collections_that_keep_the_legacy_bm25_keep_its_weights():
    assert fusion_for("how do I rotate keys", provider="local", model="all-MiniLM-L6-v2",
                      sparse="bm25-v1").dense_weight == 0.7
    assert fusion_for("列出目录内容", provider="local", model="all-MiniLM-L6-v2",
                      sparse="bm25-v1").dense_weight == 0.3
    assert fusion_for("how do I rotate keys", provider="local", model="all-MiniLM-L6-v2",
                      sparse=SPARSE_VERSION).dense_weight == DENSE_WEIGHT_READS == 0.6
