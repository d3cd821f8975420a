"""The query side: embed the query, search one namespace, filter, de-duplicate.

Plain core code: it never starts a Prefect server. ``raw_count`` is the number
of candidates the store returned (``k * 4`` per query); ``kept_count`` is what
is left after the score threshold and duplicate-text removal; the first ``k``
of those are returned.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass, field
from typing import Sequence

from kbsync.models import SearchHit
from kbsync.store.base import Filter, ScoredPoint, VectorStore

CANDIDATE_FACTOR = 4


@dataclass
class SearchResult:
    """The JSON contract of ``kbsync search --json``."""

    query: str
    namespace: str
    mode: str
    raw_count: int
    kept_count: int
    results: list[SearchHit] = field(default_factory=list)
    latency_ms: float = 0.0

    def to_dict(self) -> dict:
        """JSON form."""
        data = asdict(self)
        data["results"] = [h.to_dict() for h in self.results]
        return data


def namespace_filter(namespace: str) -> Filter:
    """Every search is confined to one namespace and skips zero-vector fallbacks."""
    return Filter.where(namespace=namespace).and_not("embedding_failed", True)


def search(
    query: str,
    *,
    store: VectorStore,
    service,
    collection: str,
    namespace: str = "default",
    k: int = 5,
    min_score: float | None = None,
) -> SearchResult:
    """Dense search of ``query`` in ``namespace``.

    Args:
        query: the user's text (must not be blank).
        store: an open vector store.
        service: the embedding service the collection was built with.
        collection: chunk collection name.
        namespace: only this namespace's chunks are considered.
        k: number of results (1..100).
        min_score: drop candidates scoring below it (cosine similarity).
    """
    if not query.strip():
        raise ValueError("query is empty")
    if not 1 <= k <= 100:
        raise ValueError(f"k must be between 1 and 100, got {k}")
    started = time.perf_counter()
    vector = service.embed_query(query)
    points = store.search(collection, vector, limit=k * CANDIDATE_FACTOR,
                          flt=namespace_filter(namespace))
    kept = keep(points, min_score=min_score)
    hits = [to_hit(rank, p) for rank, p in enumerate(kept[:k], 1)]
    return SearchResult(query=query, namespace=namespace, mode="dense", raw_count=len(points),
                        kept_count=len(kept), results=hits,
                        latency_ms=round((time.perf_counter() - started) * 1000, 2))


def keep(points: Sequence[ScoredPoint], *, min_score: float | None) -> list[ScoredPoint]:
    """Candidates above ``min_score`` with duplicate texts removed, best first."""
    seen: set[str] = set()
    kept = []
    for point in sorted(points, key=lambda p: p.score, reverse=True):
        if min_score is not None and point.score < min_score:
            continue
        digest = hashlib.sha256(" ".join(point.payload.get("text", "").split()).encode()).digest()
        if digest in seen:
            continue
        seen.add(digest)
        kept.append(point)
    return kept


def to_hit(rank: int, point: ScoredPoint) -> SearchHit:
    """A store hit as a result with its citation fields."""
    p = point.payload
    return SearchHit(rank=rank, score=round(float(point.score), 6), doc_id=p["doc_id"],
                     path=p.get("path", ""), chunk_index=int(p.get("chunk_index", 0)),
                     heading_path=p.get("heading_path", ""), page_start=p.get("page_start"),
                     page_end=p.get("page_end"), text=p.get("text", ""))


def citation(hit: SearchHit) -> str:
    """``[n] doc_id, p. 3-4, "Heading > Sub"`` (page and heading parts only when known)."""
    parts = [f"[{hit.rank}] {hit.doc_id}"]
    if hit.page_start is not None:
        pages = (f"{hit.page_start}" if hit.page_end in (None, hit.page_start)
                 else f"{hit.page_start}-{hit.page_end}")
        parts.append(f"p. {pages}")
    if hit.heading_path:
        parts.append(f'"{hit.heading_path}"')
    return ", ".join(parts)
