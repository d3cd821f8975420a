"""Checks shared by every adapter, applied before anything reaches an engine.

Nothing here imports a Qdrant type: each adapter turns the validated values
into its own engine's records. Validation covers a whole batch before the
first write, so a bad point never leaves half a batch written.
"""

from __future__ import annotations

import math
import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence, cast

from kbsync.errors import DimensionMismatch, InvalidVector, KbsyncError, UsageError
from kbsync.models import SparseVec
from kbsync.store.base import Condition, Filter, Match, Point, Range, Scalar

if TYPE_CHECKING:
    import numpy as np

# numpy is imported by the functions that check vectors, not here: every store command
# imports this module (the edge adapter's filters), and a no-op ingest checks no vector.

# Collection names become folder names in the edge adapter: keep them to a
# portable, traversal-free alphabet that a Qdrant server accepts as well.
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")

TENANT_KEYS = frozenset({"namespace"})
"""Keyword indexes created as tenant indexes (Qdrant co-locates each value's points)."""

FAILED_FLAG = "embedding_failed"
"""Payload key that allows an all-zero vector (a chunk whose embedding failed)."""

# Above this the engines' float32 storage overflows to infinity: float(np.finfo(np.float32).max),
# written out so that importing this module does not import numpy.
_F32_MAX = 3.4028234663852886e+38
# Qdrant sparse indices are unsigned 32-bit integers.
_SPARSE_INDEX_MAX = 2**32 - 1


@dataclass(frozen=True)
class ValidPoint:
    """A point that passed validation: canonical id, float vector, payload."""

    id: str
    vector: list[float]
    payload: dict[str, Any]
    sparse: SparseVec | None = None  # None also for an empty sparse vector: nothing to store


def check_collection_name(name: str) -> str:
    """Return ``name`` if it is a safe collection name.

    Raises:
        UsageError: empty, too long, or holds characters other than
            letters, digits, ``_`` and ``-`` (it becomes a folder name).
    """
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise UsageError(
            f"invalid collection name {name!r}: use 1-128 letters, digits, '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def check_dimension(dimension: int) -> int:
    """Return ``dimension`` if it is a positive int, else raise ``UsageError``."""
    if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1:
        raise UsageError(f"vector dimension must be a positive integer, got {dimension!r}")
    return dimension


_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def check_point_id(point_id: str) -> str:
    """Return ``point_id`` if it is a canonical (lower-case, hyphenated) UUID string.

    Canonical form is required because engines hand ids back canonicalised:
    accepting ``"ABC..."`` would make read-back ids differ from written ones.

    Raises:
        UsageError: not a string, or not a canonical UUID.
    """
    # The canonical form is exactly what this matches (``str(uuid.UUID(x)) == x``, at a
    # tenth of its cost: a plan slice checks thousands of state record ids).
    if isinstance(point_id, str) and _CANONICAL_UUID.fullmatch(point_id):
        return point_id
    raise UsageError(f"point id must be a canonical UUID string, got {point_id!r}")


def check_ids(ids: Sequence[str]) -> list[str]:
    """Validate a sequence of point ids (see :func:`check_point_id`)."""
    if isinstance(ids, str):
        raise UsageError("ids must be a sequence of UUID strings, not one string")
    return [check_point_id(i) for i in ids]


def check_vector(
    vector: Sequence[float] | None, dimension: int, *, allow_zero: bool, what: str
) -> list[float]:
    """Return ``vector`` as a list of Python floats after checking it.

    Args:
        vector: the values; never padded or truncated here.
        dimension: the collection's dimension.
        allow_zero: whether an all-zero vector is acceptable.
        what: names the vector in error messages (``"point <id>"``).

    Raises:
        InvalidVector: missing, not numeric, not 1-D, non-finite (also
            after float32 conversion), or all zeros while not allowed.
        DimensionMismatch: length differs from ``dimension``.
    """
    import numpy as np

    if vector is None:
        raise InvalidVector(f"{what} has no vector")
    try:
        arr = np.asarray(vector, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidVector(f"{what}: vector is not a sequence of numbers") from exc
    if arr.ndim != 1:
        raise InvalidVector(f"{what}: vector must be one-dimensional, got shape {arr.shape}")
    if arr.shape[0] != dimension:
        raise DimensionMismatch(
            f"{what}: vector has dimension {arr.shape[0]}, the collection expects {dimension}"
        )
    if not np.isfinite(arr).all():
        raise InvalidVector(f"{what}: vector holds NaN or infinite values")
    if np.abs(arr).max(initial=0.0) > _F32_MAX:
        raise InvalidVector(f"{what}: vector values overflow float32 storage")
    if not allow_zero and not arr.any():
        raise InvalidVector(
            f"{what}: vector is all zeros (allowed only with payload {FAILED_FLAG}=True)"
        )
    return arr.tolist()


def validate_points(points: Sequence[Point], dimension: int) -> list[ValidPoint]:
    """Check a whole batch before any write (see :func:`check_vector`).

    A zero vector is accepted only when the point's payload holds
    ``embedding_failed: True`` (the embed stage's explicit fallback marker).

    Raises:
        UsageError: a bad id, a non-dict payload, or an id given twice.
        InvalidVector, DimensionMismatch: see :func:`check_vector`.
    """
    ids: list[str] = []
    payloads: list[dict[str, Any]] = []
    seen: set[str] = set()
    for point in points:
        pid = check_point_id(point.id)
        if pid in seen:
            # Two versions of one id in a batch: which one wins is engine-defined.
            raise UsageError(f"point id {pid} appears twice in one upsert batch")
        seen.add(pid)
        payload = point.payload if point.payload is not None else {}
        if not isinstance(payload, dict):
            raise UsageError(f"point {pid}: payload must be a dict, got {type(payload).__name__}")
        ids.append(pid)
        payloads.append(payload)
    vectors = _batch_vectors(points, ids, payloads, dimension)
    sparse = [None if p.sparse is None else check_sparse(p.sparse, what=f"point {i}")
              for p, i in zip(points, ids)]
    return [ValidPoint(i, v, p, s if s is not None and s.indices else None)
            for i, v, p, s in zip(ids, vectors, payloads, sparse)]


def check_sparse(sparse: SparseVec, *, what: str) -> SparseVec:
    """Return ``sparse`` with plain int/float lists after checking it.

    The engines disagree on bad input (qdrant-edge 0.9.0 stores duplicate
    indices and NaN weights; qdrant-client refuses duplicates), so every
    check is ours.

    Raises:
        InvalidVector: not a ``SparseVec``, lengths differ, an index is not an
            int in ``[0, 2**32 - 1]`` or is repeated, or a value is not finite
            in float32.
    """
    if not isinstance(sparse, SparseVec):
        raise InvalidVector(f"{what}: sparse vector must be a SparseVec, got "
                            f"{type(sparse).__name__}")
    if len(sparse.indices) != len(sparse.values):
        raise InvalidVector(f"{what}: sparse vector has {len(sparse.indices)} indices but "
                            f"{len(sparse.values)} values")
    if _is_plain_sparse(sparse):
        return sparse
    indices = _plain_indices(sparse.indices)
    if indices is None:
        indices = _checked_indices(sparse.indices, what)
    if len(set(indices)) != len(indices):
        raise InvalidVector(f"{what}: sparse vector repeats an index")
    import numpy as np

    try:
        values = np.asarray(sparse.values, dtype=np.float64).reshape(len(indices))
    except (TypeError, ValueError) as exc:
        raise InvalidVector(f"{what}: sparse values are not numbers") from exc
    if not np.isfinite(values).all() or np.abs(values).max(initial=0.0) > _F32_MAX:
        raise InvalidVector(f"{what}: sparse values must be finite float32 numbers")
    return SparseVec(indices, values.tolist())


def _is_plain_sparse(sparse: SparseVec) -> bool:
    """Whether ``sparse`` already is what :func:`check_sparse` returns (lists of unique
    in-range ``int`` indices and finite float32 ``float`` values): then it is returned
    uncopied. ``encode_document`` makes every vector so; copying each through numpy cost
    more than the engine's write of it. ``type(v) is int`` excludes bools."""
    indices, values = sparse.indices, sparse.values
    if type(indices) is not list or type(values) is not list:
        return False
    if not _ints_in_range(indices) or len(set(indices)) != len(indices):
        return False
    return not values or (set(map(type, values)) <= {float} and all(map(math.isfinite, values))
                          and max(map(abs, values)) <= _F32_MAX)


def _plain_indices(indices: Sequence[Any]) -> list[int] | None:
    """``indices`` as a list when every one is a plain ``int`` in range, else ``None``.

    The common case (``encode_document`` output), checked without a Python-level
    loop per index: at a million chunks the per-index loop cost more than the
    engine's own write. ``type(i) is int`` excludes bools (a subclass).
    """
    values = list(indices)
    return values if _ints_in_range(values) else None


def _ints_in_range(values: list[Any]) -> bool:
    """Every one of ``values`` a plain ``int`` (not a bool) in ``[0, 2**32 - 1]``."""
    return not values or (set(map(type, values)) <= {int} and min(values) >= 0
                          and max(values) <= _SPARSE_INDEX_MAX)


def _checked_indices(raw: Sequence[Any], what: str) -> list[int]:
    """Each index checked alone (numpy integers accepted), naming the bad one."""
    import numpy as np

    indices: list[int] = []
    for index in raw:
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not (
                0 <= index <= _SPARSE_INDEX_MAX):
            raise InvalidVector(f"{what}: sparse index {index!r} is not an integer in "
                                f"[0, {_SPARSE_INDEX_MAX}]")
        indices.append(int(index))
    return indices


def _batch_vectors(points: Sequence[Point], ids: list[str], payloads: list[dict[str, Any]],
                   dimension: int) -> list[list[float]]:
    """All vectors checked at once as one matrix; a failing row is re-checked alone
    so the error names the point and the exact reason."""
    allow = [p.get(FAILED_FLAG) is True for p in payloads]
    if len(points) <= _PLAIN_BATCH and all(_plain_row_ok(p.vector, dimension, a)
                                            for p, a in zip(points, allow)):
        return [cast(list[float], p.vector) for p in points]
    import numpy as np

    mat = None
    if all(p.vector is not None for p in points):
        try:
            mat = np.asarray([p.vector for p in points], dtype=np.float64)
        except (TypeError, ValueError):  # ragged or non-numeric: per point below
            mat = None
    if mat is not None and mat.ndim == 2 and mat.shape == (len(points), dimension):
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(mat).all(axis=1) & (np.abs(mat).max(axis=1, initial=0.0) <= _F32_MAX)
        ok &= mat.any(axis=1) | np.asarray(allow, dtype=bool)
        if ok.all():
            return [_as_plain_row(p.vector, row) for p, row in zip(points, mat)]
    return [check_vector(p.vector, dimension, allow_zero=a, what=f"point {i}")
            for p, i, a in zip(points, ids, allow)]


_PLAIN_BATCH = 8
"""Batches up to this many points are first checked in plain Python: a no-op run's one write
(a root's totals, a meta record) then needs no numpy, whose import is ~35 ms of a ~0.3 s
no-op (issue 42); a chunk batch (64) is checked faster as one matrix."""


def _plain_row_ok(vector: Any, dimension: int, allow_zero: bool) -> bool:
    """Whether ``vector`` is a list of ``dimension`` floats, finite, within float32 and not
    all zeros unless allowed. False also when unsure (a sum that overflows): the matrix
    check then decides and names the reason."""
    if type(vector) is not list or len(vector) != dimension:
        return False
    if not all(type(x) is float for x in vector):
        return False
    total = sum(map(abs, vector))  # NaN or an infinity makes it non-finite
    return (math.isfinite(total) and max(map(abs, vector), default=0.0) <= _F32_MAX
            and (total > 0.0 or allow_zero))


def _as_plain_row(vector: Any, checked: np.ndarray) -> list[float]:
    """``vector`` itself when it is a list of ``float`` (checked as ``checked``), else a
    new list of ``checked``'s values (ints, numpy scalars, arrays): no copy of what the
    embedders already give."""
    if type(vector) is list and set(map(type, vector)) <= {float}:
        return vector
    return checked.tolist()


def check_query(vector: Sequence[float], dimension: int) -> list[float]:
    """Validate a search vector: right length, finite, not all zeros."""
    return check_vector(vector, dimension, allow_zero=False, what="query")


def check_limit(value: int, what: str) -> int:
    """Return ``value`` if it is a positive int, else raise ``UsageError``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{what} must be a positive integer, got {value!r}")
    return value


def check_score_threshold(value: float | None) -> float | None:
    """Return a finite threshold (or ``None``), else raise ``UsageError``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UsageError(f"score_threshold must be a finite number, got {value!r}")
    return float(value)


def _check_scalar(value: Any, key: str) -> Scalar:
    if not isinstance(value, (str, int)):  # bool is an int
        raise UsageError(f"filter on {key!r}: values must be str, int or bool, got {value!r}")
    return value


def check_range(cond: Range) -> Range:
    """Return ``cond`` if its key is a non-empty string and its bounds finite numbers.

    Raises:
        UsageError: a bad key, no bound at all, a bound that is not a finite
            number (bool included), or ``gte > lte``.
    """
    if not isinstance(cond.key, str) or not cond.key:
        raise UsageError(f"filter key must be a non-empty string, got {cond.key!r}")
    if cond.gte is None and cond.lte is None:
        raise UsageError(f"range filter on {cond.key!r}: set gte, lte or both")
    for bound in (cond.gte, cond.lte):
        if bound is not None and (isinstance(bound, bool) or not isinstance(bound, (int, float))
                                  or not math.isfinite(bound)):
            raise UsageError(f"range filter on {cond.key!r}: bounds must be finite numbers, "
                             f"got {bound!r}")
    if cond.gte is not None and cond.lte is not None and cond.gte > cond.lte:
        raise UsageError(f"range filter on {cond.key!r}: gte {cond.gte} is above lte {cond.lte}")
    return cond


def check_match(match: Condition) -> Condition:
    """Return ``match`` if exactly one of ``value``/``any_of`` is set with scalar values
    (a :class:`Range`: see :func:`check_range`)."""
    if isinstance(match, Range):
        return check_range(match)
    if not isinstance(match, Match):
        raise UsageError(f"filter conditions must be Match or Range, got {type(match).__name__}")
    if not isinstance(match.key, str) or not match.key:
        raise UsageError(f"filter key must be a non-empty string, got {match.key!r}")
    if (match.value is None) == (match.any_of is None):
        raise UsageError(f"filter on {match.key!r}: set exactly one of value and any_of")
    if match.any_of is None:
        _check_scalar(match.value, match.key)
    else:
        if isinstance(match.any_of, (str, bytes)):
            raise UsageError(f"filter on {match.key!r}: any_of must be a tuple of values")
        for v in match.any_of:
            _check_scalar(v, match.key)
    return match


def check_filter(flt: Filter | None) -> Filter | None:
    """Validate every condition; ``None`` and an empty filter mean "everything"."""
    if flt is None:
        return None
    if not isinstance(flt, Filter):
        raise UsageError(f"expected a kbsync Filter, got {type(flt).__name__}")
    for m in (*flt.must, *flt.must_not):
        check_match(m)
    return flt


def is_empty(flt: Filter | None) -> bool:
    """Whether ``flt`` matches every point (no conditions at all)."""
    return flt is None or (not flt.must and not flt.must_not)


def require_conditions(flt: Filter | None) -> Filter:
    """Refuse a delete filter that would match the whole collection.

    Raises:
        UsageError: ``flt`` is ``None`` or has no conditions.
    """
    checked = check_filter(flt)
    if checked is None or is_empty(checked):
        raise UsageError("refusing to delete with an empty filter: it would wipe the collection")
    return checked


def any_of_kind(values: Sequence[Scalar]) -> str:
    """Classify an ``any_of`` list for the engines' "match any" condition.

    Returns ``"str"`` or ``"int"`` when the values are homogeneous (the only
    lists Qdrant's MatchAny accepts), else ``"mixed"`` (booleans included):
    adapters then express the condition as a nested ``should`` of equalities.
    An empty list is ``"str"``: MatchAny([]) matches nothing on every engine.
    """
    if all(isinstance(v, str) for v in values):
        return "str"
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "int"
    return "mixed"


def error_context(translate: Callable[[Exception, str, str], KbsyncError]):
    """A context manager ``errors(action, name)`` that turns vendor exceptions into ours.

    Our own errors pass through; anything else the vendor raises becomes
    ``translate(exc, action, name)``, chained with ``from`` for the traceback. A panic of a
    Rust engine (pyo3's ``PanicException``, a ``BaseException``: no ``except Exception``
    catches it) is translated too, so it never reaches a user as a traceback.
    """
    @contextmanager
    def errors(action: str, name: str) -> Iterator[None]:
        try:
            yield
        except KbsyncError:
            raise
        except Exception as exc:  # vendors raise bare/unrelated exception types
            raise translate(exc, action, name) from exc
        except BaseException as exc:  # noqa: BLE001 - only an engine panic is translated
            if not is_engine_panic(exc):
                raise
            raise translate(exc, action, name) from exc  # type: ignore[arg-type]

    return errors


def is_engine_panic(exc: BaseException) -> bool:
    """Whether ``exc`` is a Rust panic surfaced by pyo3 (``pyo3_runtime.PanicException``:
    not importable by name before a panic happened, so it is known by its type's name)."""
    return type(exc).__name__ == "PanicException"
