"""Translation helpers of the edge adapter: filters, persisted config, query requests.

Split from ``edge.py`` so that module keeps to the shard lifecycle and locking.
Everything here is pure translation (no shard handle, no lock), errors included:
the binding raises bare ``Exception`` with a message, translated by message.

Facts about qdrant-edge-py 0.9.0 relied on here (checked by the conformance
suites in ``tests/store``):

- ``MatchValue(True)`` is converted to the *integer* 1 (a Python bool is an
  int), so a bool never matches; a ``numpy.bool_`` is converted to a bool;
- ``<folder>/edge_config.json`` holds ``vectors`` and ``sparse_vectors``
  (``{"sparse": {"modifier": "idf"}}``) and is rewritten at once by
  ``UpdateOperation.create_sparse_vector``;
- ``Fusion.Rrf(k)`` scores ``sum(1 / (k + rank))`` with rank counted from 0,
  as qdrant-client and the server do, and a request's top-level filter is
  also given to each prefetch here so that no engine can fuse unfiltered
  candidates.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence, cast

import qdrant_edge as qe

from kbsync.errors import (DimensionMismatch, DiskFull, KbsyncError, StoreDamaged, StoreError,
                           StoreUnavailable)
from kbsync.store import validate as cv
from kbsync.store.base import (DENSE, SPARSE, Condition, Filter, Range, Scalar,
                               ScoredPoint, SparseVec)

CONFIG_FILE = "edge_config.json"


def collection_created(store_path, name: str) -> bool:
    """Whether the embedded engine has created collection ``name`` under ``store_path``
    (its config file is looked for; the store is never opened)."""
    return (store_path / name / CONFIG_FILE).is_file()


REPAIR_ADVICE = "`kbsync verify` names the damage, `kbsync verify --repair` rebuilds it"

_DAMAGE_WORDS = ("decompress", "failed to decode", "corrupt", "checksum", "unexpected end",
                 "invalid utf-8", "deserializ")
"""Words of the engine's messages for files it cannot read back (qdrant-edge-py 0.9.0 on a
payload page overwritten: ``Failed to decode value: Failed to decompress LZ4 value``)."""


def translate(exc: Exception, action: str, name: str) -> KbsyncError:
    """Turn a binding exception (bare ``Exception`` + message, or a panic) into a kbsync
    error: damaged files and panics are :class:`StoreDamaged` naming ``kbsync verify``."""
    msg = " ".join(str(exc).split())[:300]
    text = f"edge store: {action} on collection {name!r} failed: {msg}"
    low = msg.lower()
    if cv.is_engine_panic(exc):
        return StoreDamaged(f"edge store: {action} on collection {name!r} failed: the engine "
                            f"panicked ({msg or 'no message'}); its files are probably "
                            f"damaged: {REPAIR_ADVICE}")
    if any(word in low for word in _DAMAGE_WORDS):
        return StoreDamaged(f"{text}; its files are damaged: {REPAIR_ADVICE}")
    if "wouldblock" in low or "temporarily unavailable" in low or "locked" in low:
        return StoreUnavailable(text)
    if "dimension error" in low:
        return DimensionMismatch(text)
    if "no space left on device" in low or "os error 28" in low:  # ENOSPC from a write()
        return DiskFull(text)
    return StoreError(text)


errors = cv.error_context(translate)
"""``with errors(action, name):`` translates what the binding raises."""


def _match_value(value: Scalar) -> Any:
    # See module docstring: only numpy.bool_ reaches the engine as a bool; the stub knows
    # only the Python types. numpy is imported here only: few filters match a bool, and
    # every store command imports this module.
    if isinstance(value, bool):
        import numpy as np

        return qe.MatchValue(np.bool_(value))  # type: ignore[arg-type]  # see above
    return qe.MatchValue(value)


def _condition(match: Condition) -> Any:
    """One kbsync condition as an edge condition."""
    if isinstance(match, Range):
        bounds = qe.RangeFloat(gte=None if match.gte is None else float(match.gte),
                               lte=None if match.lte is None else float(match.lte))
        return qe.FieldCondition(key=match.key, range=bounds)
    if match.any_of is None:
        assert match.value is not None  # check_match: exactly one of value and any_of is set
        return qe.FieldCondition(key=match.key, match=_match_value(match.value))
    values = list(match.any_of)
    if cv.any_of_kind(values) != "mixed":  # so all str or all int, as MatchAny wants
        return qe.FieldCondition(key=match.key,
                                 match=qe.MatchAny(cast("list[str] | list[int]", values)))
    # MatchAny takes only all-str or all-int lists: "one of" becomes OR of equalities.
    return qe.Filter(should=[qe.FieldCondition(key=match.key, match=_match_value(v))
                             for v in values])


def to_edge_filter(flt: Filter | None) -> Any:
    """Translate our filter into ``qdrant_edge.Filter`` (``None`` when empty)."""
    flt = cv.check_filter(flt)
    if flt is None or cv.is_empty(flt):
        return None
    return qe.Filter(
        must=[_condition(m) for m in flt.must] or None,
        must_not=[_condition(m) for m in flt.must_not] or None,
    )


def read_config(folder: Path, name: str) -> tuple[int, bool]:
    """``(dense dimension, has the IDF sparse vector)`` from the shard's persisted config.

    Raises:
        StoreError: no readable cosine ``DENSE`` vector, or a ``SPARSE`` vector
            without the IDF modifier (BM25 scores would be meaningless).
    """
    try:
        config = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
        params = config["vectors"][DENSE]
        size, distance = int(params["size"]), params.get("distance")
        sparse = (config.get("sparse_vectors") or {}).get(SPARSE)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StoreError(
            f"edge store: collection {name!r} at {folder} has no readable dense vector "
            f"{DENSE!r} in {CONFIG_FILE} (made by another tool or version?)"
        ) from exc
    if distance != "Cosine":
        raise StoreError(f"edge store: collection {name!r} uses {distance} distance, not Cosine")
    if sparse is not None and str((sparse or {}).get("modifier", "")).lower() != "idf":
        raise StoreError(f"edge store: collection {name!r} has a sparse vector {SPARSE!r} "
                         "without the IDF modifier (made by another tool?); re-create it")
    return size, sparse is not None


def index_operations(existing: set[str], keyword_indexes: Sequence[str],
                     bool_indexes: Sequence[str], integer_indexes: Sequence[str] = (), *,
                     memory: Any = None) -> list[Any]:
    """Updates creating the payload indexes not in ``existing`` (``namespace``: tenant;
    integer indexes serve range conditions only: no value lookup), placed at ``memory``
    in sealed segments (``seal.INDEX_MEMORY``; ``None``: the engine's default)."""
    operations = []
    for key in keyword_indexes:
        if key not in existing:
            params = qe.KeywordIndexParams(is_tenant=True if key in cv.TENANT_KEYS else None,
                                           memory=memory)
            operations.append(qe.UpdateOperation.create_field_index(key, params))
    for key in bool_indexes:
        if key not in existing:
            operations.append(qe.UpdateOperation.create_field_index(
                key, qe.BoolIndexParams(memory=memory)))
    for key in integer_indexes:
        if key not in existing:
            ranged = qe.IntegerIndexParams(lookup=False, range=True, memory=memory)
            operations.append(qe.UpdateOperation.create_field_index(key, ranged))
    return operations


def add_sparse_operation() -> Any:
    """The update that adds the IDF sparse vector to an existing shard."""
    return qe.UpdateOperation.create_sparse_vector(SPARSE, modifier=qe.Modifier.Idf)


def edge_point(point: cv.ValidPoint) -> Any:
    """A validated point as an edge point (the sparse vector only when non-empty)."""
    vectors: dict[str, Any] = {DENSE: point.vector}
    if point.sparse is not None:
        vectors[SPARSE] = qe.SparseVector(point.sparse.indices, point.sparse.values)
    return qe.Point(point.id, vectors, point.payload)


def check_sparse_query(sparse: SparseVec) -> SparseVec:
    """Validate a sparse query vector (see :func:`validate.check_sparse`)."""
    return cv.check_sparse(sparse, what="sparse query")


def no_sparse_error(name: str) -> StoreError:
    """The error for a sparse query on a collection made without ``sparse=True``."""
    return StoreError(
        f"edge store: collection {name!r} has no sparse vector {SPARSE!r} (made before hybrid "
        "search existed): run `kbsync ingest` on its roots again: it adds the sparse vector and "
        "rewrites every document (the BM25 encoder is part of the settings fingerprint; "
        "embeddings come from the cache), or search with --mode dense"
    )


def sparse_request(sparse: SparseVec, *, limit: int, edge_filter: Any,
                   with_payload: bool = True) -> Any:
    """A sparse-only query request."""
    query = qe.Query.Nearest(qe.SparseVector(sparse.indices, sparse.values), using=SPARSE)
    return qe.QueryRequest(limit=limit, query=query, filter=edge_filter,
                           with_payload=with_payload, with_vector=False)


def dense_request(dense: Sequence[float], *, limit: int, edge_filter: Any,
                  score_threshold: float | None, params: Any,
                  with_payload: bool = True) -> Any:
    """A dense query request (``params``: ``seal.search_params``, rescoring)."""
    return qe.QueryRequest(limit=limit, query=qe.Query.Nearest(list(dense), using=DENSE),
                           filter=edge_filter, score_threshold=score_threshold, params=params,
                           with_payload=with_payload, with_vector=False)


COSINE_SLACK = 1e-3
"""How far past [-1, 1] a cosine score may stray (float32 rounding of the rescore)."""


def to_scored(hits: Sequence[Any], name: str, *, cosine: bool = False) -> list[ScoredPoint]:
    """Engine hits as kbsync scored points.

    A score that is not finite (a sealed segment's vectors overwritten: qdrant-edge-py 0.9.0
    then scores ``nan`` and ~1e37), or a ``cosine`` score outside [-1, 1], is never returned.

    Raises:
        StoreDamaged: a hit's score cannot be right; names the collection and the repair.
    """
    scored = [ScoredPoint(str(h.id), float(h.score), h.payload or {}) for h in hits]
    for point in scored:
        if not math.isfinite(point.score) or (cosine and abs(point.score) > 1 + COSINE_SLACK):
            raise StoreDamaged(
                f"edge store: collection {name!r} scored a point {point.score!r}, which no "
                f"{'cosine ' if cosine else ''}search can: a sealed segment's vectors are "
                f"damaged; {REPAIR_ADVICE}")
    return scored
