"""Translation helpers of the server adapter: errors, filters, points, responses.

Split from ``server.py`` so that module keeps to the client lifecycle and the
VectorStore methods. Nothing here holds a client.

Vendor exceptions are translated here: connection failures, timeouts, 429 and
5xx become ``StoreUnavailable`` (retry), dimension errors ``DimensionMismatch``,
the rest ``StoreError``.
"""

from __future__ import annotations

from typing import Any

import httpx
from qdrant_client import models
from qdrant_client.common.client_exceptions import ResourceExhaustedResponse
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from kbsync.errors import DimensionMismatch, KbsyncError, StoreError, StoreUnavailable
from kbsync.store import layout
from kbsync.store import validate as cv
from kbsync.store.base import DENSE, SPARSE, Condition, Filter, Range, ScoredPoint


def is_missing_collection(exc: Exception) -> bool:
    """Whether ``exc`` says the collection does not exist (server 404 or local mode)."""
    if isinstance(exc, UnexpectedResponse):
        if exc.status_code != 404:
            return False
        try:  # only Qdrant's own message: a bare 404 can also mean a wrong URL prefix
            error = str(exc.structured()["status"]["error"])
        except (ValueError, KeyError, TypeError):
            return False
        return "Collection" in error and "doesn't exist" in error
    msg = str(exc)
    return isinstance(exc, ValueError) and msg.startswith("Collection") and "not found" in msg


def translate(exc: Exception, action: str, name: str) -> KbsyncError:
    """Turn a qdrant-client / httpx / local-mode exception into a kbsync error."""
    text = f"qdrant: {action} on collection {name!r} failed: {exc}"
    if isinstance(exc, ResourceExhaustedResponse):
        return StoreUnavailable(f"{text} (retry after {exc.retry_after_s}s)",
                                retry_after=float(exc.retry_after_s))
    if isinstance(exc, ResponseHandlingException):
        if isinstance(exc.source, (httpx.TransportError, OSError)):
            return StoreUnavailable(f"qdrant: {action} on {name!r}: server unreachable: "
                                    f"{exc.source!r}")
        return StoreError(f"qdrant: {action} on {name!r}: unreadable response: {exc.source}")
    if isinstance(exc, (httpx.TransportError, ConnectionError, TimeoutError)):
        return StoreUnavailable(text)
    if isinstance(exc, UnexpectedResponse):
        if exc.status_code is not None and (exc.status_code == 429 or exc.status_code >= 500):
            return StoreUnavailable(text)
    msg = str(exc)
    if "dimension error" in msg:
        return DimensionMismatch(text)
    if isinstance(exc, RuntimeError) and "already accessed by another instance" in msg:
        return StoreUnavailable(text)
    return StoreError(text)


errors = cv.error_context(translate)
"""``with errors(action, name):`` translates what the qdrant-client raises."""


def condition(match: Condition) -> Any:
    """One kbsync condition as a qdrant-client condition."""
    if isinstance(match, Range):
        return models.FieldCondition(key=match.key, range=models.Range(gte=match.gte,
                                                                       lte=match.lte))
    if match.any_of is None:
        return models.FieldCondition(key=match.key, match=models.MatchValue(value=match.value))
    values = list(match.any_of)
    if cv.any_of_kind(values) != "mixed":
        return models.FieldCondition(key=match.key, match=models.MatchAny(any=values))
    # MatchAny takes only all-str or all-int lists: "one of" becomes OR of equalities.
    return models.Filter(should=[
        models.FieldCondition(key=match.key, match=models.MatchValue(value=v)) for v in values
    ])


def to_client_filter(flt: Filter | None) -> models.Filter | None:
    """Translate our filter into ``qdrant_client.models.Filter`` (``None`` when empty)."""
    flt = cv.check_filter(flt)
    if flt is None or cv.is_empty(flt):
        return None
    return models.Filter(
        must=[condition(m) for m in flt.must] or None,
        must_not=[condition(m) for m in flt.must_not] or None,
    )


def has_sparse(info: Any, name: str) -> bool:
    """Whether a collection's info holds the IDF sparse vector ``SPARSE``."""
    params = (info.config.params.sparse_vectors or {}).get(SPARSE)
    if params is None:
        return False
    if params.modifier != models.Modifier.IDF:
        raise StoreError(f"qdrant: collection {name!r} has a sparse vector {SPARSE!r} without "
                         "the IDF modifier (made by another tool?); re-create it")
    return True


def no_sparse(name: str) -> StoreError:
    """The error for sparse use of a collection made without ``sparse=True``."""
    return StoreError(
        f"qdrant: collection {name!r} has no sparse vector {SPARSE!r} (made before hybrid "
        "search existed): run `kbsync ingest` on its roots again: it adds the sparse vector and "
        "rewrites every document (the BM25 encoder is part of the settings fingerprint; "
        "embeddings come from the cache), or search with --mode dense"
    )


def to_point(p: cv.ValidPoint) -> models.PointStruct:
    """A validated point as a client point (the sparse vector only when non-empty)."""
    vector: dict[str, Any] = {DENSE: p.vector}
    if p.sparse is not None:
        vector[SPARSE] = models.SparseVector(indices=p.sparse.indices, values=p.sparse.values)
    return models.PointStruct(id=p.id, vector=vector, payload=p.payload)


def scored(result: Any) -> list[ScoredPoint]:
    """A query response (``None``: missing collection) as kbsync scored points."""
    if result is None:
        return []
    return [ScoredPoint(str(p.id), float(p.score), p.payload or {}) for p in result.points]


def dense_size(info: Any, name: str) -> int:
    """The size of the ``DENSE`` cosine vector in a collection's info."""
    vectors = info.config.params.vectors
    params = vectors.get(DENSE) if isinstance(vectors, dict) else None
    if params is None:
        raise StoreError(f"qdrant: collection {name!r} has no named dense vector {DENSE!r} "
                         "(created by another tool?)")
    if params.distance != models.Distance.COSINE:
        raise StoreError(f"qdrant: collection {name!r} uses {params.distance} distance, not Cosine")
    return int(params.size)


# --- the sealed, quantized layout on a server (issue 23) ----------------------------------
# The embedded store's choices, shared on the store's floor (kbsync.store.layout), as a server
# takes them: a segment is indexed and int8-quantized once it holds SEAL_EVERY points' worth
# of dense vectors (read at call time, as the embedded store reads it), and a
# dense search rescores OVERSAMPLING x k quantized candidates on the original vectors. A
# server builds its HNSW graph (its default m=16) in background threads, so unlike the
# embedded engine (m=0: the build would hold the GIL) it keeps one.


def optimizers_config(dimension: int) -> models.OptimizersConfigDiff:
    """A new collection's optimizer: index a segment at the embedded store's seal size."""
    return models.OptimizersConfigDiff(indexing_threshold=layout.seal_threshold_kb(dimension))


def quantization_config() -> models.ScalarQuantization:
    """int8 scalar quantization of indexed segments, the quantized vectors kept in RAM."""
    return models.ScalarQuantization(scalar=models.ScalarQuantizationConfig(
        type=models.ScalarType.INT8, quantile=layout.QUANTILE, always_ram=True))


def search_params() -> models.SearchParams:
    """Dense search parameters: rescore the quantized candidates on the original vectors."""
    return models.SearchParams(quantization=models.QuantizationSearchParams(
        rescore=True, oversampling=layout.OVERSAMPLING))
