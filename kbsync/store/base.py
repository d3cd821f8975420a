"""The vector store interface kbsync writes through, and our own filter type.

Adapters (``edge``: the in-process engine; ``server``: qdrant-client against a
Qdrant server) translate these records and every vendor exception at their
boundary, so nothing above this package imports a Qdrant type.

Invariants every adapter keeps (checked by ``tests/store/test_conformance.py``):
- collections use cosine distance on one named dense vector ``DENSE``;
- point ids are UUID strings chosen by the caller (deterministic upserts);
- ``upsert`` of an existing id replaces vector and payload;
- ``search`` scores are cosine similarities, best first;
- a vector whose length differs from the collection's raises ``DimensionMismatch``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Protocol, Sequence, runtime_checkable

DENSE = "dense"
"""Name of the dense vector in every collection (room is left for ``sparse``)."""

Scalar = str | int | bool


@dataclass(frozen=True)
class Match:
    """``key`` equals ``value``, or (with ``any_of``) equals one of them."""

    key: str
    value: Scalar | None = None
    any_of: tuple[Scalar, ...] | None = None


@dataclass(frozen=True)
class Filter:
    """All of ``must`` and none of ``must_not``; empty means everything."""

    must: tuple[Match, ...] = ()
    must_not: tuple[Match, ...] = ()

    @classmethod
    def where(cls, **equals: Scalar) -> "Filter":
        """Shorthand: ``Filter.where(namespace="a", doc_id="x")``."""
        return cls(must=tuple(Match(k, v) for k, v in equals.items()))

    def and_not(self, key: str, value: Scalar) -> "Filter":
        """This filter plus ``key != value``."""
        return Filter(self.must, self.must_not + (Match(key, value),))


@dataclass
class Point:
    """A point to write or a point read back (``vector`` may be omitted on reads)."""

    id: str
    payload: dict[str, Any]
    vector: list[float] | None = None


@dataclass(frozen=True)
class ScoredPoint:
    """A search hit from the store."""

    id: str
    score: float
    payload: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class VectorStore(Protocol):
    """What kbsync needs from a vector database."""

    def ensure_collection(
        self, name: str, *, dimension: int, keyword_indexes: Sequence[str] = ()
    ) -> None:
        """Create the collection if missing, else check its dimension.

        Raises:
            DimensionMismatch: the existing collection has another dimension.
        """

    def collection_dimension(self, name: str) -> int | None:
        """The dense dimension of ``name``, or ``None`` when it does not exist."""

    def upsert(self, name: str, points: Sequence[Point]) -> None:
        """Insert or replace points (all must carry a vector)."""

    def delete_ids(self, name: str, ids: Sequence[str]) -> None:
        """Delete points by id; unknown ids are ignored."""

    def delete(self, name: str, flt: Filter) -> None:
        """Delete every point matching ``flt`` (an empty filter is refused)."""

    def scroll(
        self, name: str, flt: Filter | None = None, *, with_payload: bool = True,
        with_vectors: bool = False, page_size: int = 1024,
    ) -> Iterator[Point]:
        """Iterate over matching points in id order, page by page."""

    def count(self, name: str, flt: Filter | None = None) -> int:
        """Exact number of matching points (0 when the collection is missing)."""

    def search(
        self, name: str, vector: Sequence[float], *, limit: int,
        flt: Filter | None = None, score_threshold: float | None = None,
    ) -> list[ScoredPoint]:
        """Nearest points to ``vector`` by cosine similarity, best first."""

    def close(self) -> None:
        """Flush and release the handle (the edge engine allows one per folder)."""
