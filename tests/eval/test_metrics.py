"""Metric functions against hand-computed values."""

from __future__ import annotations

import math

import pytest

from kbsync.eval import metrics as m
from kbsync.eval.run import QueryOutcome, aggregate
from kbsync.models import SearchHit

L3, L5 = math.log2(3), math.log2(5)  # discounts of ranks 2 and 4


def hit(doc_id: str, score: float, rank: int = 1) -> SearchHit:
    return SearchHit(rank=rank, score=score, doc_id=doc_id, path=doc_id, chunk_index=0,
                     heading_path="", page_start=None, page_end=None, text="t")


def test_two_relevant_at_ranks_two_and_four():
    ranked, rel = ["a", "b", "c", "d"], {"b", "d"}
    assert m.hit_at_k(ranked, rel, 3) == 1.0
    assert m.hit_at_k(ranked, rel, 1) == 0.0
    assert m.mrr_at_k(ranked, rel, 3) == 0.5
    assert m.mrr_at_k(ranked, rel, 1) == 0.0
    assert m.recall_at_k(ranked, rel, 3) == 0.5
    assert m.recall_at_k(ranked, rel, 4) == 1.0
    # DCG = 1/log2(3) + 1/log2(5); ideal = 1 + 1/log2(3)
    assert m.ndcg_at_k(ranked, rel, 10) == pytest.approx((1 / L3 + 1 / L5) / (1 + 1 / L3))
    assert m.ndcg_at_k(ranked, rel, 10) == pytest.approx(0.650921, abs=1e-6)
    assert m.first_relevant_rank(ranked, rel) == 2


def test_k_smaller_than_the_number_of_relevant_documents():
    ranked, rel = ["a", "b", "c", "d"], {"a", "b", "c"}
    assert m.recall_at_k(ranked, rel, 2) == pytest.approx(2 / 3)  # best reachable at k=2
    assert m.ndcg_at_k(ranked, rel, 2) == pytest.approx(1.0)  # ideal holds only 2 docs
    assert m.ndcg_at_k(["x", "a", "b"], rel, 2) == pytest.approx((1 / L3) / (1 + 1 / L3))


def test_nothing_relevant_retrieved_scores_zero():
    ranked, rel = ["x", "y"], {"a"}
    assert (m.hit_at_k(ranked, rel, 10), m.mrr_at_k(ranked, rel, 10),
            m.recall_at_k(ranked, rel, 10), m.ndcg_at_k(ranked, rel, 10)) == (0, 0, 0, 0)
    assert m.first_relevant_rank(ranked, rel) is None
    assert m.ndcg_at_k([], rel, 10) == 0.0


def test_empty_relevant_set_is_undefined_not_zero():
    for fn in (m.hit_at_k, m.mrr_at_k, m.recall_at_k, m.ndcg_at_k):
        assert fn(["a", "b"], set(), 5) is None


def test_k_must_be_positive():
    with pytest.raises(ValueError):
        m.hit_at_k(["a"], {"a"}, 0)


def test_documents_rank_by_their_best_chunk():
    hits = [hit("a", 0.9), hit("b", 0.5), hit("b", 0.95), hit("c", 0.7), hit("a", 0.1)]
    assert m.rank_documents(hits) == ["b", "a", "c"]


def test_ties_are_broken_pessimistically_then_by_doc_id():
    hits = [hit("a", 0.9), hit("rel", 0.8), hit("z", 0.8), hit("y", 0.8)]
    ranked = m.rank_documents(hits, {"rel"})
    assert ranked == ["a", "y", "z", "rel"]  # the relevant doc goes last among equals
    assert m.mrr_at_k(ranked, {"rel"}, 10) == 0.25
    # two relevant documents tied: doc_id order, still after the non-relevant one
    assert m.rank_documents([hit("r2", 0.5), hit("n", 0.5), hit("r1", 0.5)],
                            {"r1", "r2"}) == ["n", "r1", "r2"]


def outcome(mode: str, hit_: float | None, ndcg: float | None, latency: float,
            raw: int = 40, kept: int = 30) -> QueryOutcome:
    return QueryOutcome(mode=mode, line=1, query="q", relevant=[], top_docs=[],
                        first_relevant_rank=None, hit=hit_, mrr=hit_, ndcg10=ndcg, recall=hit_,
                        raw_count=raw, kept_count=kept, latency_ms=latency)


def test_aggregate_skips_unlabelled_queries_and_takes_percentiles():
    rows = [outcome("dense", 1.0, 1.0, 1.0), outcome("dense", 0.0, 0.5, 2.0),
            outcome("dense", None, None, 3.0, raw=20, kept=10), outcome("dense", 1.0, 0.0, 4.0),
            outcome("hybrid", 0.0, 0.25, 10.0)]
    agg = aggregate(rows)
    assert list(agg) == ["dense", "hybrid"]
    dense = agg["dense"]
    assert dense["hit_rate"] == pytest.approx(2 / 3, abs=1e-4)
    assert dense["ndcg@10"] == 0.5
    assert dense["queries"] == 4 and dense["scored"] == 3
    assert dense["raw_count_mean"] == 35.0 and dense["kept_count_mean"] == 25.0
    assert dense["latency_ms_p50"] == 2.5 and dense["latency_ms_p95"] == 3.85
    assert agg["hybrid"]["ndcg@10"] == 0.25
    only_unlabelled = aggregate([outcome("dense", None, None, 1.0)])["dense"]
    assert only_unlabelled["ndcg@10"] is None and only_unlabelled["scored"] == 0
