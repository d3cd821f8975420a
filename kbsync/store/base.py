"""The vector store interface kbsync writes through, and our own filter type.

Adapters (``edge``: the in-process engine; ``server``: qdrant-client against a
Qdrant server) translate these records and every vendor exception at their
boundary, so nothing above this package imports a Qdrant type.

Invariants every adapter keeps (checked by ``tests/store/test_conformance.py``):
- collections use cosine distance on one named dense vector ``DENSE``;
- point ids are UUID strings chosen by the caller (deterministic upserts);
- ``upsert`` of an existing id replaces vector and payload;
- ``search`` scores are cosine similarities, best first;
- a vector whose length differs from the collection's raises ``DimensionMismatch``;
- a collection made with ``sparse=True`` also holds an optional named sparse vector
  ``SPARSE`` with Qdrant's IDF modifier (BM25 when the values are BM25 term
  weights, see ``kbsync/text/sparse.py``); ``sparse_search`` scores are
  ``sum(idf(term) * weight)``, checked by ``tests/store/test_sparse_conformance.py``.
  The store fuses nothing: hybrid search is one dense and one sparse query, fused by
  :mod:`kbsync.query.fusion` above the store, so every adapter fuses alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Protocol, Sequence, runtime_checkable

from kbsync.models import SparseVec  # the type the store keeps; the text floor makes them

DENSE = "dense"
"""Name of the dense vector in every collection."""

SPARSE = "sparse"
"""Name of the sparse (BM25, IDF modifier) vector in collections made with ``sparse=True``."""

Scalar = str | int | bool


@dataclass(frozen=True)
class Match:
    """``key`` equals ``value``, or (with ``any_of``) equals one of them."""

    key: str
    value: Scalar | None = None
    any_of: tuple[Scalar, ...] | None = None


@dataclass(frozen=True)
class Range:
    """``key`` is a number within ``[gte, lte]`` (either bound may be open: ``None``).

    A point whose ``key`` is missing, or not a number, never matches. On an
    array value, one element inside the range is enough (Qdrant's rule).
    """

    key: str
    gte: float | None = None
    lte: float | None = None


Condition = Match | Range
"""One condition of a :class:`Filter`."""


@dataclass(frozen=True)
class Filter:
    """All of ``must`` and none of ``must_not``; empty means everything.

    A :class:`Match` on an array payload value matches when one element does
    (so ``Match("folders", any_of=("docs",))`` finds ``folders: ["docs", "docs/api"]``).
    """

    must: tuple[Condition, ...] = ()
    must_not: tuple[Condition, ...] = ()

    @classmethod
    def where(cls, **equals: Scalar) -> "Filter":
        """Shorthand: ``Filter.where(namespace="a", doc_id="x")``."""
        return cls(must=tuple(Match(k, v) for k, v in equals.items()))

    def and_not(self, key: str, value: Scalar) -> "Filter":
        """This filter plus ``key != value``."""
        return Filter(self.must, self.must_not + (Match(key, value),))

    def and_also(self, *conditions: Condition) -> "Filter":
        """This filter plus every one of ``conditions``."""
        return Filter(self.must + tuple(conditions), self.must_not)


@dataclass
class Point:
    """A point to write or a point read back.

    ``vector`` may be omitted on reads; ``sparse`` is written when given (the
    collection must have been made with ``sparse=True``) and never read back.
    """

    id: str
    payload: dict[str, Any]
    vector: list[float] | None = None
    sparse: SparseVec | None = None


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
        self, name: str, *, dimension: int, keyword_indexes: Sequence[str] = (),
        sparse: bool = False, bool_indexes: Sequence[str] = (),
        integer_indexes: Sequence[str] = (),
    ) -> None:
        """Create the collection if missing, else check its dimension.

        With ``sparse=True`` the collection also gets the ``SPARSE`` vector
        (IDF modifier); an existing collection without it gets it added.
        Missing payload indexes are created: ``keyword_indexes`` (tenant
        indexes for ``namespace``) and ``bool_indexes`` (a filter on an
        unindexed field reads every candidate's payload: ~8 ms per search at
        1k points per namespace in the edge engine, ~1 ms with the index), and
        ``integer_indexes`` (integer indexes with range support, for
        :class:`Range` conditions).

        Raises:
            DimensionMismatch: the existing collection has another dimension.
            StoreError: the sparse vector is missing and the engine cannot add
                it, or it exists without the IDF modifier.
        """

    def collection_dimension(self, name: str) -> int | None:
        """The dense dimension of ``name``, or ``None`` when it does not exist."""

    def upsert(self, name: str, points: Sequence[Point]) -> None:
        """Insert or replace points (all must carry a vector)."""

    def delete_ids(self, name: str, ids: Sequence[str]) -> None:
        """Delete points by id; unknown ids are ignored."""

    def delete(self, name: str, flt: Filter) -> None:
        """Delete every point matching ``flt`` (an empty filter is refused)."""

    def set_payload(self, name: str, flt: Filter, payload: dict[str, Any]) -> None:
        """Set the keys of ``payload`` on every point matching ``flt`` (other keys and the
        vectors stay; an empty filter is refused; a missing collection is ignored)."""

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

    def sparse_search(
        self, name: str, sparse: SparseVec, *, limit: int, flt: Filter | None = None,
    ) -> list[ScoredPoint]:
        """Points sharing terms with ``sparse``, by ``sum(idf * weight)``, best first.

        Raises:
            StoreError: the collection has no ``SPARSE`` vector.
        """

    def close(self) -> None:
        """Flush and release the handle (the edge engine allows one per folder)."""
