"""The segment layout both adapters share: when a segment seals (is indexed and quantized),
how it is quantized, and how a dense search rescores.

The embedded adapter seals its appendable segment itself (:mod:`kbsync.store.edge.seal`);
a server indexes and quantizes its segments in the background, given the same threshold
and quantization (:mod:`kbsync.store.server.query`). Both read these values from here, so
importing one adapter never loads the other's engine (``tests/arch/test_layers.py``).

Read at call time: :data:`SEAL_EVERY` is read through this module whenever a threshold is
computed or a seal is due, so a test or a bench that sets ``layout.SEAL_EVERY`` before a
store is made changes both adapters (and nothing else needs patching). Plain values only:
no Qdrant type here.

Tested by ``tests/store/test_edge_seal.py`` (the embedded engine seals at
:data:`SEAL_EVERY`) and ``tests/store/test_server_layout.py`` (a server gets the same
layout).
"""

from __future__ import annotations

SEAL_EVERY = 20_000
"""Points an appendable segment takes before it seals: bounds one seal call and the float scan
of the unsealed tail; 1M chunks make 50 sealed segments. A seal of the chunk layout (8 payload
indexes, the sparse index) costs 2.3-3.1 s of CPU per 20k points on the 2-core machine at load
5-7 (~0.25 s fixed plus ~110 µs a point, most of it the index builds parsing every payload
again), ~1.3 s without the payload indexes (docs/SCALING.md): a larger N seals less often but
holds the engine (and the GIL) longer each time. 16,000 was measured at 1M beside 20,000 in one
session: mean seal CPU 2.20 s against 2.31, but 62 segments, upserts 17% slower, searches and
the disk (1 MiB flag files per index per segment) larger, so 20,000 stayed."""

OVERSAMPLING = 2.0
"""Quantized candidates per result that are rescored on the original vectors."""

QUANTILE = 0.99
"""The int8 scalar quantization's quantile (the range outliers are clipped to)."""


def seal_threshold_kb(dimension: int) -> int:
    """:data:`SEAL_EVERY` points of ``dimension`` float32 values, in KB: the engines'
    ``indexing_threshold`` (and the embedded engine's ``max_segment_size``)."""
    return max(1, SEAL_EVERY * dimension * 4 // 1024)
