"""Hybrid fusion: dense and BM25 candidates merged by weighted distribution-based scores.

Why not plain RRF: on kbsync's real labelled sets (``data/eval``, MiniLM) RRF
lost to its own best half in both languages (English 0.690 vs dense 0.702,
Chinese 0.555 vs BM25 0.755 nDCG@10), because ranks throw away how far ahead a
candidate is. Distribution-based score fusion (DBSF, as in Qdrant) keeps that:
each list's scores are mapped to ``[mean - 3 sd, mean + 3 sd] -> [0, 1]`` and a
point's fused score is the weighted sum of its normalised scores (0 where a
list did not return it).

The weight follows what the dense model can read (see
docs/decisions/fusion-weights.md): a semantic model in the query's language gets
:data:`DENSE_WEIGHT_READS`, a query the model cannot read (Chinese for the
English-only MiniLM) or a lexical "dense" vector (the hash embedder) gets
:data:`DENSE_WEIGHT_BLIND`. They were chosen on a 0.1 grid on the two sets
(``tests/bench/fusion_bench.py``) for each BM25 scheme, since a stronger BM25
wants less of the dense side: 0.6 / 0.1 with Qdrant's BM25 (English MiniLM
0.739 / 0.749 / 0.746 / 0.736 at 0.4-0.7; Chinese MiniLM 0.768 / 0.769 / 0.767 /
0.757 at 0.0-0.3; hash 0.652 English and 0.780 Chinese at 0.1), 0.7 / 0.3 for
collections that keep ``bm25-v1`` (:data:`WEIGHTS_BY_SPARSE`).

Fusion runs here, over two plain store queries, so both store adapters fuse
identically.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Sequence

from kbsync.store.base import ScoredPoint
from kbsync.text.cjk import count_cjk

DENSE_WEIGHT_READS = 0.6
DENSE_WEIGHT_BLIND = 0.1
WEIGHTS_BY_SPARSE = {"bm25-v1": (0.7, 0.3)}
"""(reads, blind) for the BM25 schemes older collections keep; others use the defaults."""
FUSION_DEPTH = 100  # candidates per side: the normalisation needs a distribution, not a top 5
_LETTER = re.compile(r"[^\W\d_]", re.UNICODE)


@dataclass(frozen=True)
class Fusion:
    """How one hybrid query was fused (reported in search notes at debug level)."""

    dense_weight: float

    @property
    def sparse_weight(self) -> float:
        """The BM25 side's weight: the rest of 1."""
        return round(1.0 - self.dense_weight, 6)


def is_cjk_query(text: str) -> bool:
    """True when at least half of the query's letters are Chinese, Japanese or Korean."""
    letters = _LETTER.findall(text)
    return bool(letters) and count_cjk(text) * 2 >= len(letters)


def english_only(provider: str, model: str) -> bool:
    """True for embedders that read English only (the bundled MiniLM)."""
    if provider != "local":
        return False
    from kbsync.embed.local import MODELS

    spec = MODELS.get(model)
    return spec is not None and spec.languages == "English"


def fusion_for(query: str, *, provider: str, model: str, sparse: str = "") -> Fusion:
    """The fusion weights for ``query`` against an embedder and the collection's BM25
    scheme ``sparse`` (its version; see module doc)."""
    reads, blind = WEIGHTS_BY_SPARSE.get(sparse, (DENSE_WEIGHT_READS, DENSE_WEIGHT_BLIND))
    if provider == "hash":  # feature hashing of words: lexical, like BM25 but weaker
        return Fusion(blind)
    if english_only(provider, model) and is_cjk_query(query):
        return Fusion(blind)
    return Fusion(reads)


def _normalised(points: Sequence[ScoredPoint]) -> dict[str, float]:
    """Scores mapped by ``[mean - 3 sd, mean + 3 sd] -> [0, 1]`` (one point: 1).

    The mean and spread are those of the best :data:`FUSION_DEPTH` scores, so a
    deeper search (evaluation asks for 400) ranks its top like a 100-deep one.
    """
    if not points:
        return {}
    scores = [p.score for p in points[:FUSION_DEPTH]]
    # Plain floats: statistics.pstdev sums exact fractions (~0.3 ms a list, per search).
    mean = math.fsum(scores) / len(scores)
    spread = 6 * math.sqrt(math.fsum((s - mean) ** 2 for s in scores) / len(scores))
    if spread <= 0 or max(scores) == min(scores):  # equal scores: no spread, exactly
        return {p.id: 1.0 for p in points}
    low = mean - spread / 2
    return {p.id: (p.score - low) / spread for p in points}


def fuse(dense: Sequence[ScoredPoint], sparse: Sequence[ScoredPoint], fusion: Fusion, *,
         limit: int) -> list[ScoredPoint]:
    """Weighted DBSF of two candidate lists, best first, at most ``limit`` points.

    Ties keep the order the lists gave (dense first), so a query whose sparse
    side is empty ranks exactly as dense search does.
    """
    by_id: dict[str, ScoredPoint] = {}
    for point in list(dense) + list(sparse):
        by_id.setdefault(point.id, point)
    dense_n, sparse_n = _normalised(dense), _normalised(sparse)
    scored = [ScoredPoint(pid, fusion.dense_weight * dense_n.get(pid, 0.0)
                          + fusion.sparse_weight * sparse_n.get(pid, 0.0), point.payload)
              for pid, point in by_id.items()]
    scored.sort(key=lambda p: -p.score)  # stable: ties stay in list order
    return scored[:limit]
