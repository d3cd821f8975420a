"""BM25 parameters, shared by the sparse encoders (:mod:`kbsync.text.sparse` and the
one collections built before it keep, :mod:`kbsync.text.sparse_v1`)."""

from __future__ import annotations

from dataclasses import dataclass

K1 = 1.2
B = 0.75


@dataclass(frozen=True)
class Bm25Params:
    """BM25 settings; each encoder's config sets its own defaults.

    Attributes:
        k1: term-frequency saturation (0 = binary weights).
        b: length normalisation (0 = none, 1 = full).
        avg_len: assumed average document length in tokens (> 0).

    Raises:
        ValueError: on construction, a parameter outside its range.
    """

    k1: float = K1
    b: float = B
    avg_len: float = 1.0

    def __post_init__(self) -> None:
        if self.k1 < 0 or not 0.0 <= self.b <= 1.0 or self.avg_len <= 0:
            raise ValueError(f"bad BM25 parameters: k1={self.k1}, b={self.b}, "
                             f"avg_len={self.avg_len}")
