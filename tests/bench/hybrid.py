"""kbsync's hybrid search at the store level, for the store benchmarks.

The store adapters fuse nothing (``kbsync/store/base.py``): hybrid search is one dense and one
sparse query fused above the store (:func:`kbsync.query.search.hybrid_candidates`). This calls
that function with the weights of a semantic model, so a store benchmark's "hybrid" measures
what ``search()`` asks of the store, without the query embedding.
"""

from __future__ import annotations

from typing import Any, Sequence


def fused_search(store: Any, name: str, dense: Sequence[float], sparse: Any, *, limit: int,
                 flt: Any = None, depth: int | None = None) -> list:
    """Dense and sparse candidates (``depth`` each, default ``limit``), fused, best first."""
    from kbsync.query.fusion import DENSE_WEIGHT_READS, Fusion
    from kbsync.query.search import hybrid_candidates

    return hybrid_candidates(store, name, dense, sparse, Fusion(DENSE_WEIGHT_READS), limit=limit,
                             flt=flt, depth=depth or limit)
