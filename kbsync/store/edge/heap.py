"""Handing the C heap's free pages back to the kernel once a seal is done.

A seal (:func:`kbsync.store.edge.seal.seal`) builds a segment's payload and sparse indexes
on the C heap, writes them to mapped files and frees them. glibc keeps what was freed in its
arenas, so a writing process's anonymous memory grew with every seal: at 160k chunks of the
chunk layout, 362 MiB, against 211 MiB with the free pages returned after each seal
(``malloc_trim(0)``, measured on the 2-core machine, docs/SCALING.md). Returning them costs a
few milliseconds, with the GIL released (``ctypes`` calls drop it), so it runs after every seal.

Only glibc has ``malloc_trim``; elsewhere (musl, macOS) this does nothing and says so once.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import time
from functools import lru_cache
from typing import Callable

log = logging.getLogger(__name__)


@lru_cache(maxsize=1)
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else ctypes.CDLL(None)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        log.debug("the C library has no malloc_trim: freed heap pages stay with the process")
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_free_heap() -> bool:
    """Return the C heap's free pages to the kernel (every arena, ``malloc_trim(0)``).

    Never raises and frees nothing still in use. Returns whether the C library could do it.
    """
    trim = _malloc_trim()
    if trim is None:
        return False
    started = time.perf_counter()
    trim(0)
    log.debug("returned the free heap pages to the kernel in %.1f ms",
              (time.perf_counter() - started) * 1000)
    return True
