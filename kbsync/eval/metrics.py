"""Retrieval metrics over a ranked list of documents (binary relevance).

Plain functions, no I/O. Conventions shared by every metric here:

- ``ranked`` is a list of distinct doc_ids, best first (see :func:`rank_documents`);
- ``relevant`` is the set of doc_ids labelled relevant for the query;
- an empty ``relevant`` set makes every metric undefined: the functions return
  ``None`` (aggregation then leaves the query out of the mean) rather than 0 or 1,
  either of which would silently bias the average;
- ``k`` counts documents, not chunks, and must be at least 1.
"""

from __future__ import annotations

import math
from typing import AbstractSet, Iterable, Sequence

from kbsync.models import SearchHit


def rank_documents(hits: Iterable[SearchHit],
                   relevant: AbstractSet[str] = frozenset()) -> list[str]:
    """Documents ordered by their best chunk's score, best first.

    A document appears once, at the score of its best chunk. Documents whose
    best scores tie are ordered pessimistically: non-relevant ones first, then
    by doc_id. So an arbitrary order among equal scores can never raise a
    metric, and the result is deterministic.

    Args:
        hits: search hits of one query (any order; several per document allowed).
        relevant: the query's relevant doc_ids (only used to break ties).
    """
    best: dict[str, float] = {}
    for hit in hits:
        if hit.doc_id not in best or hit.score > best[hit.doc_id]:
            best[hit.doc_id] = hit.score
    return sorted(best, key=lambda d: (-best[d], d in relevant, d))


def _check_k(k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")


def first_relevant_rank(ranked: Sequence[str], relevant: AbstractSet[str]) -> int | None:
    """1-based rank of the first relevant document, or ``None`` when none is ranked."""
    for rank, doc_id in enumerate(ranked, 1):
        if doc_id in relevant:
            return rank
    return None


def hit_at_k(ranked: Sequence[str], relevant: AbstractSet[str], k: int) -> float | None:
    """1.0 when a relevant document is among the first ``k``, else 0.0."""
    _check_k(k)
    if not relevant:
        return None
    return 1.0 if any(d in relevant for d in ranked[:k]) else 0.0


def mrr_at_k(ranked: Sequence[str], relevant: AbstractSet[str], k: int) -> float | None:
    """Reciprocal rank of the first relevant document within ``k``, else 0.0."""
    _check_k(k)
    if not relevant:
        return None
    rank = first_relevant_rank(ranked[:k], relevant)
    return 1.0 / rank if rank else 0.0


def recall_at_k(ranked: Sequence[str], relevant: AbstractSet[str], k: int) -> float | None:
    """Share of the relevant documents found in the first ``k``.

    Limit: when ``k < len(relevant)`` the best reachable value is
    ``k / len(relevant)``, not 1 (the textbook definition, kept on purpose so
    values stay comparable across query sets).
    """
    _check_k(k)
    if not relevant:
        return None
    return len(set(ranked[:k]) & relevant) / len(relevant)


def ndcg_at_k(ranked: Sequence[str], relevant: AbstractSet[str], k: int = 10) -> float | None:
    """Normalised discounted cumulative gain with binary gains, cut at ``k``.

    ``DCG = sum(1 / log2(rank + 1))`` over relevant documents in the first ``k``;
    the ideal DCG places ``min(k, len(relevant))`` relevant documents first, so
    a perfect ranking scores 1.0 even when ``k < len(relevant)``.
    """
    _check_k(k)
    if not relevant:
        return None
    dcg = sum(1.0 / math.log2(rank + 1)
              for rank, doc_id in enumerate(ranked[:k], 1) if doc_id in relevant)
    ideal = sum(1.0 / math.log2(rank + 1) for rank in range(1, min(k, len(relevant)) + 1))
    return dcg / ideal
