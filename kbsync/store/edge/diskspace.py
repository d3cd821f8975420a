"""Free-space checks for the embedded store, so a full disk is a ``DiskFull`` error,
never a SIGBUS.

qdrant-edge-py writes through memory-mapped files. When the file system has no
block left for a page the engine touches, the kernel kills the process with
SIGBUS (exit 135): no exception, no message, no chance to clean up (seen on a
20 MiB tmpfs and on a 24 MiB ext4 loop mount alike). So kbsync checks *before*
each write that the space the write needs is there.

Figures measured with qdrant-edge-py 0.9.0 (tests/ops/test_disk_full.py keeps
them honest), hash embedder, dimension 384:

- a stored chunk costs ~10.1 KiB for 1,360 characters of text and 235 sparse
  terms: about 2.1 times its raw size (vector + payload + sparse vector), half
  of it in the write-ahead log until the shard is closed. We budget
  :data:`ENGINE_FACTOR` (2.5) times the raw size; on a generated mixed share the
  estimate came out 1.9 times what the engine allocated (7.2 KiB per chunk).
- usage grows linearly with points, in no steps: new WAL segments (32 MiB) and
  index pages (4 MiB) are created sparse, costing nothing until written.
- creating a collection costs ~0.2 MiB on ext4; on tmpfs ~10 MiB (1 MiB per
  null/bool index bitmap and per deleted-flags file, allocated at once).
- **tmpfs allocates on read**: a read fault on a hole of a shared mapping
  allocates the page. Opening a shard maps its keyword indexes (4 MiB page +
  1 MiB tracker each) and its dense vector chunks (32 MiB each) and touches
  every page, so on tmpfs *opening* a store can need ~90 MiB and SIGBUSes on a
  full one, even for ``kbsync stats``. On ext4 opening allocates nothing but
  still writes a few small files ("save structure"), which fails with ENOSPC.

Invariants: a check never writes; a refused write leaves the store and the
state as they were (the check runs before the batch's first upsert).
Limits: the estimate is an upper bound for the engine's current layout; another
process filling the disk between the check and the write can still beat it.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from kbsync.errors import DiskFull

log = logging.getLogger(__name__)

MIB = 2**20
ENGINE_FACTOR = 2.5  # measured 2.1x raw bytes per point (segment + WAL), plus headroom
POINT_PAYLOAD_OVERHEAD = 512  # payload fields besides text, path and heading (bytes)
STATE_RECORD_BYTES = 1024  # one state record: payload + 1-dim vector, before the factor
CACHE_ENTRY_OVERHEAD = 256  # key, SQLite row and index per cached vector (bytes)
# Per write: the small structure files the engine rewrites atomically ("save structure").
# Measured: usage grows linearly with points, no step; new WAL segments (32 MiB) and
# index pages (4 MiB) are created sparse, and their holes are counted by mapped_holes.
BATCH_FLOOR = 1 * MIB
# Creating a collection, measured: ~10 MiB on tmpfs (bitmaps), ~0.2 MiB on ext4; plus what
# its first opening maps on tmpfs (5 MiB per keyword index).
CREATE_NEED = {True: 32 * MIB, False: 1 * MIB}
FILLS_ON_READ = frozenset({"tmpfs", "shmem", "ramfs"})
# Files the engine writes lazily as data arrives (their holes cost nothing on opening):
# the write-ahead log and the gridstore pages of payloads and sparse vectors.
_LAZY = re.compile(r"(^|/)wal/|/payload_storage/page_\d+\.dat$|/vector_storage-[^/]*sparse"
                   r"[^/]*/store/page_\d+\.dat$")
# Writes in flight in this process (the flow writes several batches at once): each check
# counts the others' needs as taken, so concurrent batches never share the same free space.
_ledger_lock = threading.Lock()
_in_flight: dict[int, int] = {}
_tokens = itertools.count()


def mib(value: int) -> str:
    """``value`` bytes as ``"12.3 MiB"``."""
    return f"{value / MIB:.1f} MiB"


def _existing(path: Path) -> Path:
    """``path`` or its nearest existing ancestor (statvfs needs an existing path)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged process may still allocate on ``path``'s file system."""
    st = os.statvfs(_existing(path))
    if st.f_blocks == 0:  # ramfs and the like report no size: no limit to check against
        return sys.maxsize
    return st.f_bavail * st.f_frsize


def fs_type(path: Path) -> str:
    """The file system type of ``path`` from /proc/self/mounts ("" when unknown)."""
    target = str(_existing(path).resolve())
    best, kind = "", ""
    try:
        lines = Path("/proc/self/mounts").read_text(encoding="utf-8", errors="replace")
    except OSError:  # not Linux: the read-fill reserve is then not applied
        return ""
    for line in lines.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        mount = fields[1].replace("\\040", " ")
        inside = target == mount or target.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, kind = mount, fields[2]
    return kind


def fills_on_read(path: Path) -> bool:
    """Whether reading a hole of a mapped file allocates on this file system (tmpfs)."""
    return fs_type(path) in FILLS_ON_READ


def mapped_holes(folder: Path) -> int:
    """Bytes the engine allocates when it next opens the shards under ``folder`` on a
    file system that fills on read: the holes of the files it maps and touches.

    0 on other file systems, where a read of a hole allocates nothing.
    """
    folder = Path(folder)
    if not folder.exists() or not fills_on_read(folder):
        return 0
    holes = 0
    for dirpath, _dirs, files in os.walk(folder):
        for name in files:
            path = os.path.join(dirpath, name)
            if _LAZY.search(path.replace(os.sep, "/")):
                continue
            try:
                st = os.lstat(path)
            except OSError:  # removed while walking (the engine swaps segments)
                continue
            holes += max(0, st.st_size - st.st_blocks * 512)
    return holes


def chunk_bytes(text: str, *, dimension: int, sparse_terms: int, path_chars: int = 0,
                heading_chars: int = 0) -> int:
    """Raw bytes of one stored chunk: dense vector, payload and ``sparse_terms`` sparse-vector
    entries."""
    payload = (len(text.encode("utf-8", "surrogatepass")) + 3 * path_chars + heading_chars
               + POINT_PAYLOAD_OVERHEAD)
    return dimension * 4 + payload + 8 * sparse_terms


@dataclass(frozen=True)
class BatchEstimate:
    """What writing a batch costs on disk, in bytes (engine factor included)."""

    documents: int
    chunks: int
    store: int
    cache: int

    @property
    def total(self) -> int:
        """Store plus cache bytes plus the fixed floor."""
        return self.store + self.cache + BATCH_FLOOR


def estimate_batch(docs: Iterable[tuple[Sequence[str], int, Sequence[str]]], *,
                   dimension: int, sparse_terms: Callable[[str], int]) -> BatchEstimate:
    """Estimate a batch from ``(chunk texts, path length, heading paths)`` per document.

    ``sparse_terms`` bounds a chunk text's sparse-vector entries: how text becomes terms
    is the text wing's (:func:`kbsync.text.sparse.term_bound`); the store only stores.
    """
    documents = chunks = raw = 0
    for texts, path_chars, headings in docs:
        documents += 1
        chunks += len(texts)
        raw += STATE_RECORD_BYTES + path_chars
        raw += sum(chunk_bytes(t, dimension=dimension, sparse_terms=sparse_terms(t),
                               path_chars=path_chars,
                               heading_chars=len(h)) for t, h in zip(texts, headings))
    cache = chunks * (dimension * 4 + CACHE_ENTRY_OVERHEAD)
    return BatchEstimate(documents, chunks, int(raw * ENGINE_FACTOR), cache)


@contextmanager
def room(where: Path, *, need: int, what: str, margin: int = 0) -> Iterator[None]:
    """Hold ``need`` bytes of ``where``'s free space for the write inside the block.

    Like :func:`require`, and the bytes stay booked until the block ends, so
    writes running at the same time in other threads each get their own room.

    Raises:
        DiskFull: see :func:`require`; the block does not run.
    """
    with _ledger_lock:
        booked = sum(_in_flight.values())
        _check(where, need=need, what=what, margin=margin, booked=booked)
        token = next(_tokens)
        _in_flight[token] = need
    try:
        yield
    finally:
        with _ledger_lock:
            _in_flight.pop(token, None)


def require(where: Path, *, need: int, what: str, margin: int = 0) -> None:
    """Raise :class:`DiskFull` unless ``where`` has ``need`` + reserve + ``margin`` free.

    The reserve is :func:`mapped_holes` of ``where``: what the next opening of the
    store will allocate on a read-filling file system, so a run never leaves a
    store that can no longer be opened.

    Raises:
        DiskFull: one line naming the folder, what is free and what is needed.
    """
    with _ledger_lock:
        booked = sum(_in_flight.values())
    _check(where, need=need, what=what, margin=margin, booked=booked)


def _check(where: Path, *, need: int, what: str, margin: int, booked: int) -> None:
    free = free_bytes(where)
    reserve = mapped_holes(where)
    total = need + reserve + margin + booked
    if free >= total:
        return
    parts = [f"{what} {mib(need)}"]
    if reserve:
        parts.append(f"pages the engine maps on opening {mib(reserve)}")
    if margin:
        parts.append(f"margin KBSYNC_MIN_FREE_MB {mib(margin)}")
    if booked:
        parts.append(f"writes in progress {mib(booked)}")
    raise DiskFull(f"not enough disk space under {where}: {mib(free)} free, {mib(total)} "
                   f"needed ({' + '.join(parts)}); nothing of it was written: free space "
                   "(or lower KBSYNC_MIN_FREE_MB) and run again")


def require_open(folder: Path, name: str) -> None:
    """Refuse to open the shard ``folder`` when opening it would need more than is free.

    Raises:
        DiskFull: on a read-filling file system whose free space is under the holes
            the engine touches on opening (it would SIGBUS).
    """
    need = mapped_holes(folder)
    if not need:
        return
    free = free_bytes(folder)
    if free < need:
        raise DiskFull(f"cannot open collection {name!r} under {folder}: {mib(free)} free, "
                       f"{mib(need)} needed (file pages the engine maps on opening, which "
                       f"{fs_type(folder)} allocates on read); free space and run again")


def require_create(folder: Path, name: str) -> None:
    """Refuse to create collection ``name`` at ``folder`` without room for it.

    Raises:
        DiskFull: less free space than a new collection takes (measured, see module doc).
    """
    need = CREATE_NEED[fills_on_read(folder)]
    free = free_bytes(folder)
    if free < need:
        raise DiskFull(f"cannot create collection {name!r} under {folder.parent}: "
                       f"{mib(free)} free, {mib(need)} needed; free space and run again")
