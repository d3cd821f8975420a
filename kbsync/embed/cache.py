"""A bounded on-disk cache of embedding vectors, shared by threads and processes.

Backed by :class:`diskcache.Cache` (SQLite + files), which is safe under
concurrent use from many threads and processes on one machine and evicts the
least recently used entries once ``size_limit`` bytes are exceeded. Vectors are
stored as little-endian float32 bytes: 1.5 KB for 384 dimensions instead of
about 8 KB pickled.

A cache is never the truth: when the disk is full (SQLite "database or disk is
full", ENOSPC) or the cache cannot be opened or locked, reads count as misses
and writes are dropped, with one warning per cache instance (then debug lines).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import sys
import threading
from array import array
from os import PathLike
from typing import Iterable, Mapping, Sequence

import diskcache

from kbsync.embed.base import TextKind

log = logging.getLogger(__name__)

_GIB = 1024**3
# What a failing cache raises: SQLite errors (disk full, I/O, lock), OSError (ENOSPC on its
# files), diskcache.Timeout (its lock wait ran out).
_SOFT_ERRORS = (sqlite3.Error, OSError, diskcache.Timeout)


def cache_key(provider: str, model: str, dimension: int, kind: TextKind | str, text: str) -> str:
    """The cache key of one text: sha256 of a JSON list of everything shaping its vector.

    Invariant: any change of provider, model, dimension or kind (query/passage
    prefixes differ for e5) gives a different key, so a model change never
    reuses vectors. The text enters only as its sha256; no secret ever does.
    """
    kind_value = kind.value if isinstance(kind, TextKind) else str(kind)
    text_hash = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    payload = json.dumps([provider, model, int(dimension), kind_value, text_hash], ensure_ascii=True)
    return hashlib.sha256(payload.encode("ascii")).hexdigest()


def pack_vector(vector: Sequence[float]) -> bytes:
    """float32 little-endian bytes of ``vector``."""
    packed = array("f", vector)
    if sys.byteorder != "little":
        packed.byteswap()
    return packed.tobytes()


def unpack_vector(blob: bytes) -> list[float]:
    """Inverse of :func:`pack_vector`."""
    packed = array("f")
    packed.frombytes(blob)
    if sys.byteorder != "little":
        packed.byteswap()
    return packed.tolist()


class EmbeddingCache:
    """Maps :func:`cache_key` keys to vectors, on disk, bounded in size.

    Invariants: values round-trip through float32 (a cached vector equals the
    float32 rounding of what was stored); ``hits``/``misses`` count lookups made
    through this instance (this process only). Unreadable entries count as
    misses and are logged, never raised.

    Args:
        directory: cache folder, created if missing. Several processes may open it.
        size_limit_bytes: eviction threshold (least recently used first).
        timeout_s: how long a writer waits for SQLite's lock before giving up.
    """

    def __init__(
        self,
        directory: str | PathLike[str],
        *,
        size_limit_bytes: int = 4 * _GIB,
        timeout_s: float = 60.0,
    ) -> None:
        self.directory = str(directory)
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self._warned = False
        self._size_limit, self._timeout = int(size_limit_bytes), timeout_s
        self._cache: diskcache.Cache | None = None
        try:
            self._cache = diskcache.Cache(
                self.directory,
                size_limit=int(size_limit_bytes),
                eviction_policy="least-recently-used",
                # diskcache culls inside each set(); within a transaction the file
                # does not shrink until commit, so it would evict ~10 entries per
                # set, far below the bound. We cull once after each committed batch.
                cull_limit=0,
                timeout=timeout_s,
            )
        except _SOFT_ERRORS as exc:
            if not os.access(self.directory, os.W_OK):  # a read-only home: reads go on quietly
                self._warned = True
                log.info("embedding cache at %s cannot be written: going on without it (%s)",
                         self.directory, exc)
            else:
                self._soft_failure("open", exc)

    def _soft_failure(self, action: str, exc: BaseException) -> None:
        """Log a cache failure: a warning the first time, then at debug level."""
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        level = logging.DEBUG if self._warned else logging.WARNING
        self._warned = True
        log.log(level, "embedding cache at %s: %s failed (%s: %s); going on without it "
                "(vectors are computed again)", self.directory, action, type(exc).__name__,
                first)

    @classmethod
    def from_gb(cls, directory: str | PathLike[str], size_gb: float) -> "EmbeddingCache":
        """Open a cache bounded to ``size_gb`` GiB."""
        return cls(directory, size_limit_bytes=int(size_gb * _GIB))

    def get_many(self, keys: Sequence[str]) -> list[list[float] | None]:
        """The vector for each key, or None where absent; counts hits and misses."""
        found: list[list[float] | None] = []
        blobs: list = [None] * len(keys)
        try:
            # One transaction: under LRU every read also writes an access time, and
            # batching those writes is ~10x faster than one commit per key. If only
            # that commit fails (disk full), the values read are still good.
            if self._cache is not None:
                with self._cache.transact(retry=True):
                    blobs = [self._cache.get(key, default=None, retry=True) for key in keys]
        except _SOFT_ERRORS as exc:
            self._soft_failure("reading", exc)
        for blob in blobs:
            vector = None
            if isinstance(blob, bytes) and blob and len(blob) % 4 == 0:
                vector = unpack_vector(blob)
            elif blob is not None:
                log.warning("embedding cache: ignoring an unreadable entry (%s)", type(blob).__name__)
            found.append(vector)
        hit_count = sum(v is not None for v in found)
        with self._lock:
            self.hits += hit_count
            self.misses += len(found) - hit_count
        return found

    def set_many(self, items: Mapping[str, Sequence[float]] | Iterable[tuple[str, Sequence[float]]]) -> int:
        """Store vectors, then evict least recently used entries while over the bound.

        Returns how many were stored. One transaction per call, so a batch costs
        one commit.
        """
        pairs = list(items.items() if isinstance(items, Mapping) else items)
        if not pairs or self._cache is None:
            return 0
        try:
            with self._cache.transact(retry=True):
                for key, vector in pairs:
                    self._cache.set(key, pack_vector(vector), retry=True)
            evicted = self._cache.cull(retry=True)
        except _SOFT_ERRORS as exc:
            self._soft_failure("writing", exc)
            return 0
        if evicted:
            log.debug("embedding cache: evicted %d entries to stay under %d bytes", evicted, self._cache.size_limit)
        return len(pairs)

    def get(self, key: str) -> list[float] | None:
        """One vector or None."""
        return self.get_many([key])[0]

    def set(self, key: str, vector: Sequence[float]) -> None:
        """Store one vector."""
        self.set_many([(key, vector)])

    def __len__(self) -> int:
        return 0 if self._cache is None else len(self._cache)

    def volume(self) -> int:
        """Estimated bytes on disk."""
        return 0 if self._cache is None else self._cache.volume()

    def stats(self) -> dict[str, int]:
        """Counters of this instance plus the entry count."""
        with self._lock:
            return {"hits": self.hits, "misses": self.misses, "entries": len(self)}

    def close(self) -> None:
        """Close SQLite connections (the cache reopens them if used again)."""
        if self._cache is not None:
            self._cache.close()

    def __enter__(self) -> "EmbeddingCache":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __getstate__(self) -> dict:
        # diskcache handles hold SQLite connections: ship the location, not the handle.
        return {"directory": self.directory, "size_limit": self._size_limit,
                "timeout": self._timeout}

    def __setstate__(self, state: dict) -> None:
        EmbeddingCache.__init__(self, state["directory"], size_limit_bytes=state["size_limit"], timeout_s=state["timeout"])

    def __repr__(self) -> str:
        return f"EmbeddingCache({self.directory!r})"
