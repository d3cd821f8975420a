"""One ONNX Runtime graph run on every core at once: one single-threaded run per core.

The local engines run one unpadded text (or e5 window) per session run
(:mod:`kbsync.embed.onnx_engine` says why). A run is ~200 small ops; split across cores
by ONNX Runtime's intra-op threads, each op wakes and joins its threads, and without
spinning (which a CPU-bound neighbour such as a conversion worker turns into stalls,
docs/models.md) much of the cores' time goes to that. Here each run is single-threaded
and as many runs as there are cores go side by side, so a core idles only when a batch
runs out of texts. Measured on real zh-CN handbook chunks with e5 (2 cores, load ~1.4):
12.0 chunks/s against 9.5 for one run at a time on 2 intra-op threads (10.6 with
spinning).

Invariant: a run's output does not depend on which runs share the cores (each is one
thread's computation; activations are quantized per run), nor on the machine's core count.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import numpy as np

T = TypeVar("T")
R = TypeVar("R")


def default_lanes() -> int:
    """The cores this process may run on (its affinity, not the machine's count)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class RunLanes:
    """A single-threaded ``InferenceSession`` and ``lanes`` threads that call it at once.

    ``InferenceSession.run`` is thread-safe and releases the GIL. The pool is shared by
    every caller, so two batches embedded at once still run ``lanes`` texts at a time.

    Args:
        model_file: the ONNX file.
        lanes: runs at once; None = one per core this process may use.

    Raises:
        whatever ``onnxruntime`` raises for a file it cannot load (callers word it).
    """

    def __init__(self, model_file: Path, *, lanes: int | None = None) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(model_file), options,
                                            providers=["CPUExecutionProvider"])
        self.lanes = lanes or default_lanes()
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = 0
        self._pool_lock = threading.Lock()

    def run(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        """The first output of one run, on the calling thread."""
        return self.session.run(None, feed)[0]

    def map(self, work: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """``[work(item) for item in items]``, up to ``lanes`` at once; order kept.

        ``work`` calls :meth:`run`; an exception in any item is raised here.
        """
        items = list(items)
        if len(items) <= 1 or self.lanes == 1:
            return [work(item) for item in items]
        return list(self._executor().map(work, items))

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            # A forked child inherits the pool but not its threads: it would queue forever.
            if self._pool is None or self._pool_pid != os.getpid():
                self._pool = ThreadPoolExecutor(self.lanes, thread_name_prefix="kbsync-onnx")
                self._pool_pid = os.getpid()
            return self._pool
