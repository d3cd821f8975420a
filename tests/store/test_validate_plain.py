"""Plain input passes validation uncopied; anything else is still checked in full (#23).

At a million chunks, copying every vector and sparse vector through numpy cost more than
the engine's write of it. ``validate`` now returns lists that already are what it would
make; these tests pin that the shortcut changes neither the answers nor the refusals.
"""

from __future__ import annotations

import numpy as np
import pytest

from kbsync.errors import InvalidVector
from kbsync.models import SparseVec
from kbsync.store import Point
from kbsync.store import validate as cv

ID = "00000000-0000-0000-0000-000000000001"


def test_plain_lists_are_passed_on_uncopied() -> None:
    vector, sparse = [0.5, -0.5, 0.25], SparseVec([3, 1, 7], [1.0, 0.5, 2.0])
    [valid] = cv.validate_points([Point(ID, {}, vector, sparse)], 3)
    assert valid.vector is vector and valid.sparse is sparse


@pytest.mark.parametrize("vector", [[1, 0, 0], np.array([0.5, 0.5, 0.5]),
                                    [np.float32(0.5), 0.5, 0.5], (0.5, 0.5, 0.5)])
def test_other_numbers_become_plain_floats(vector) -> None:
    [valid] = cv.validate_points([Point(ID, {}, vector, None)], 3)
    assert valid.vector == [float(x) for x in vector]
    assert {type(x) for x in valid.vector} == {float}


def test_sparse_with_int_values_or_numpy_indices_is_made_plain() -> None:
    out = cv.check_sparse(SparseVec([np.int64(4), 2], [1, 2]), what="p")
    assert out == SparseVec([4, 2], [1.0, 2.0])
    assert {type(x) for x in out.indices} == {int} and {type(x) for x in out.values} == {float}


@pytest.mark.parametrize("bad, reason", [
    (SparseVec([1, 1], [1.0, 2.0]), "repeats an index"),
    (SparseVec([True], [1.0]), "not an integer"),
    (SparseVec([2**32], [1.0]), "not an integer"),
    (SparseVec([1], [float("inf")]), "finite float32"),
    (SparseVec([1], [1e39]), "finite float32"),
    (SparseVec([1], [float("nan")]), "finite float32"),
])
def test_bad_sparse_is_refused_with_its_reason(bad: SparseVec, reason: str) -> None:
    with pytest.raises(InvalidVector, match=reason):
        cv.check_sparse(bad, what="point 1")


def test_the_written_out_float32_maximum_is_numpys() -> None:
    """``_F32_MAX`` is a literal so that importing ``validate`` does not import numpy."""
    assert cv._F32_MAX == float(np.finfo(np.float32).max)
    over = float(np.nextafter(cv._F32_MAX, np.inf))
    with pytest.raises(InvalidVector, match="overflow float32"):
        cv.check_vector([over, 0.0], 2, allow_zero=False, what="p")


ROWS = [[0.5, -0.5, 0.25], [0.0, 0.0, 0.0], [-0.0, 0.0, 0.0], [float("nan"), 1.0, 1.0],
        [float("inf"), 1.0, 1.0], [1.0, float("-inf"), 0.0], [3.5e38, 0.0, 0.0],
        [-3.4028234663852886e+38, 1.0, 1.0], [1e308, 1e308, 1e308], [1, 0.0, 0.0],
        [0.5, 0.5], [0.5, 0.5, 0.5, 0.5], (0.5, 0.5, 0.5), [np.float32(0.5), 0.5, 0.5]]


def _outcome(rows: list, allow: bool) -> object:
    try:
        points = [Point(f"{ID[:-2]}{i:02d}", {cv.FAILED_FLAG: allow}, row, None)
                  for i, row in enumerate(rows)]
        return [v.vector for v in cv.validate_points(points, 3)]
    except Exception as exc:  # the type and the message are the answer compared
        return type(exc).__name__, str(exc)


@pytest.mark.parametrize("allow", [False, True])
@pytest.mark.parametrize("row", ROWS, ids=range(len(ROWS)))
def test_a_small_batch_gets_the_answers_of_the_matrix_check(row, allow) -> None:
    """Batches of up to ``_PLAIN_BATCH`` points are checked in plain Python first (no numpy
    import on a no-op's one write, issue 42): each row alone, and padded past the limit with
    good rows so the matrix decides, answers the same."""
    good = [0.5, 0.5, 0.5]
    alone = _outcome([row], allow)
    matrix = _outcome([row] + [good] * cv._PLAIN_BATCH, allow)
    if isinstance(alone, tuple):
        assert alone == matrix
    else:
        assert isinstance(matrix, list) and alone == matrix[:1]
