"""kbsync's hybrid search at the store level, for the store benchmarks.

The store adapters fuse nothing (``kbsync/store/base.py``): hybrid search is one dense and one
sparse query, fused above the store by :mod:`kbsync.query.fusion` (weighted DBSF), and on the
embedded store only the kept results' payloads are fetched. This is that path without the query
embedding, so a store benchmark's "hybrid" measures what ``search()`` asks of the store.
"""

from __future__ import annotations

from typing import Any, Sequence


def fused_search(store: Any, name: str, dense: Sequence[float], sparse: Any, *, limit: int,
                 flt: Any = None, depth: int | None = None) -> list:
    """Dense and sparse candidates (``depth`` each, default ``limit``), fused, best first."""
    from kbsync.query.fusion import DENSE_WEIGHT_READS, Fusion, fuse
    from kbsync.query.search import with_payloads

    depth = depth or limit
    fetch = getattr(store, "payloads", None)
    bare = {} if fetch is None else {"with_payload": False}
    dense_hits = store.search(name, dense, limit=depth, flt=flt, **bare)
    sparse_hits = (store.sparse_search(name, sparse, limit=depth, flt=flt, **bare)
                   if sparse.indices else [])
    fused = fuse(dense_hits, sparse_hits, Fusion(DENSE_WEIGHT_READS), limit=limit)
    return fused if fetch is None else with_payloads(fetch, name, fused)
