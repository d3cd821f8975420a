"""Checks of a sealed segment's files before the engine maps them, and the page-cache
warm-up of its flag files and int8 vectors (:func:`warm_mapped_files`).

A sealed segment's vectors are memory-mapped: a file cut short on disk (a copy that
stopped, a full disk, a bad restore) would make the first search that reads past its
end die of SIGBUS, with no error to report. So before a shard is loaded its sealed
segments' file sizes are checked against the number of points they hold, and a short
file is :class:`~kbsync.errors.StoreDrift` naming the segment and the file; ``kbsync
verify`` reports that line and ``kbsync verify --repair`` sets the collection aside and
rebuilds it from the shares (:func:`kbsync.maintenance.repair.set_aside_damaged`; a segment
the seal manifest names is set aside alone, :mod:`kbsync.maintenance.damage`).

Facts about qdrant-edge-py 0.9.0's sealed (non-appendable) segment files relied on here
(``tests/store/test_edge_sealed_damage.py`` checks them):

- ``segment.json`` names the dense vector with ``storage_type`` ``Mmap`` (an appendable
  segment's is ``ChunkedMmap``, preallocated in chunks: its sizes say nothing);
- ``id_tracker.versions`` holds 8 bytes per point, ``id_tracker.deleted`` a bit per point
  (cut short, the engine panics on open: a ``PanicException`` no ``except Exception`` catches);
- ``vector_storage-<name>/matrix.dat`` holds a 4-byte header and ``size`` float32 per
  point; ``quantized.data`` (int8 scalar) ``size + 4`` bytes per point.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kbsync.errors import StoreDrift, StoreReadOnly

log = logging.getLogger(__name__)

READ_ONLY_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS)
# the engine's messages for the same causes (it raises a bare Exception with the OS text)
_READ_ONLY_TEXTS = ("Permission denied", "Read-only file system", "(os error 13)",
                    "(os error 30)", "(os error 1)")


def is_read_only_cause(text: str) -> bool:
    """True when an engine message says a file could not be opened for writing."""
    return any(t in text for t in _READ_ONLY_TEXTS)


def read_only(folder: Path, cause: str) -> StoreReadOnly:
    """The one line for a store that cannot be written: why it cannot even be searched,
    and what to do (tested by ``tests/store/test_read_only_store.py``)."""
    return StoreReadOnly(
        f"edge store at {folder} cannot be written ({cause}): the embedded engine "
        "(qdrant-edge) maps its files read-write even to search, so a store on a read-only "
        "mount or without write permission cannot be opened at all; copy KBSYNC_HOME to a "
        "writable folder (cp -a) and point KBSYNC_HOME there, or serve the store from a "
        "Qdrant server (KBSYNC_QDRANT_URL)")


_VERSION_BYTES = 8
_MATRIX_HEADER = 4


def _expected_sizes(segment: Path) -> list[tuple[str, int]]:
    """``(relative file, minimum bytes)`` of a sealed segment; ``[]`` for an appendable one
    or a segment whose own description cannot be read (the engine reports that one)."""
    try:
        config = json.loads((segment / "segment.json").read_text(encoding="utf-8"))["config"]
        points = (segment / "id_tracker.versions").stat().st_size // _VERSION_BYTES
    except (OSError, ValueError, KeyError, TypeError):
        return []
    expected = [("id_tracker.deleted", (points + 7) // 8)]
    for name, params in (config.get("vector_data") or {}).items():
        if params.get("storage_type") != "Mmap":
            continue
        size = int(params["size"])
        expected.append((f"vector_storage-{name}/matrix.dat", _MATRIX_HEADER + points * size * 4))
        if (params.get("quantization_config") or {}).get("scalar"):
            expected.append((f"vector_storage-{name}/quantized.data", points * (size + 4)))
    return expected


SEAL_FACTOR = 2
"""A seal writes a copy of the appendable segment (vectors, payloads, ids, indexes) plus the
quantized vectors and a fresh appendable segment: budget twice the allocated bytes."""
SEAL_FLOOR = 48 * 2**20  # the fresh appendable segment's preallocated files (tmpfs: real pages)


def is_appendable(segment: Path) -> bool:
    """Whether ``segment``'s dense vectors are appendable (``ChunkedMmap``) storage."""
    try:
        config = json.loads((segment / "segment.json").read_text(encoding="utf-8"))["config"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return any(p.get("storage_type") == "ChunkedMmap"
               for p in (config.get("vector_data") or {}).values())


def seal_need(folder: Path) -> int:
    """Bytes a seal of the shard at ``folder`` may write (see :data:`SEAL_FACTOR`)."""
    allocated = 0
    for segment in (folder / "segments").glob("*/"):
        if is_appendable(segment):
            allocated += sum(f.stat().st_blocks * 512 for f in segment.rglob("*") if f.is_file())
    return SEAL_FACTOR * allocated + SEAL_FLOOR


def short_files(folder: Path) -> list[str]:
    """``segment/file (has N of M bytes)`` for every sealed-segment file cut short."""
    found = []
    for segment in sorted((folder / "segments").glob("*/")):
        for relative, minimum in _expected_sizes(segment):
            path = segment / relative
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                size = -1
            if size < minimum:
                has = "is missing" if size < 0 else f"has {size} of {minimum} bytes"
                found.append(f"segment {segment.name}: {relative} {has}")
    return found


def require_whole_segments(folder: Path, name: str) -> None:
    """Raise :class:`StoreDrift` naming the first sealed-segment file cut short.

    Raises:
        StoreDrift: a sealed segment of ``folder`` has a file shorter than its points need.
    """
    short = short_files(folder)
    if short:
        more = f" (and {len(short) - 1} more)" if len(short) > 1 else ""
        raise StoreDrift(
            f"edge store: collection {name!r} at {folder} cannot be opened, a sealed segment "
            f"is truncated: {short[0]}{more}; `kbsync verify --repair` sets a damaged chunk "
            "collection aside and rebuilds it from the files")


_WARM_CHUNK = 1 << 20
_WARM_THREADS = 2


def warm_mapped_files(folder: Path) -> tuple[int, float]:
    """Read ahead every segment's bit-flag files (``flags_a.dat``) and every sealed
    segment's int8 vectors (``quantized.data``) before the engine loads the shard at
    ``folder``; returns ``(files, seconds)``. Changes nothing on disk.

    Why the flag files: qdrant-edge-py 0.9.0 keeps each flag set (the null and bool payload
    indexes, deleted vectors: ~19 per sealed segment of kbsync's chunk layout) in a 1 MiB
    file, however few points the segment holds, and on load walks every bit of it with
    readahead off (``MADV_RANDOM``); a load also drops the shard's files from the page cache
    (``POSIX_FADV_DONTNEED``), so each open found them gone: one major page fault per 4 KiB,
    256 per file. At 1M chunks (50 segments) that was 231k faults. Read ahead here, the
    pages are in the cache when the engine walks them: 5.5k faults
    (``tests/bench/store_reopen.py`` has the times). The files are sparse, so this is mostly
    holes, no disk I/O.

    Why the int8 vectors: they are mapped (``seal.QUANTIZED_MEMORY``) and read with
    readahead off too, so the first search that scans them after an open faulted them in
    one 4 KiB page at a time: 93k major faults and 2.5-2.9 s at 1M chunks. Asked for here,
    the kernel reads them in large sequential requests while the engine loads (the request
    returns once the reads are queued), and a search finds them cached. Limit: it asks for
    all of them, 366 MiB at 1M chunks (0.27-0.48 s there with the flag files), whatever the
    first search will read; a store far past 1M chunks belongs on a Qdrant server.

    How: ``POSIX_FADV_WILLNEED``, or plain reads where the platform has no
    ``posix_fadvise``; two threads, which release the GIL. A file that cannot be read is
    left to the engine's load, which reports it.
    """
    started = time.perf_counter()
    segments = folder / "segments"
    files = sorted(segments.glob("*/**/flags_a.dat")) + sorted(
        segments.glob("*/vector_storage-*/quantized.data"))

    def read(path: Path) -> None:
        try:
            if hasattr(os, "posix_fadvise"):  # the kernel fills the cache; nothing copied out
                descriptor = os.open(path, os.O_RDONLY)
                try:
                    os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_WILLNEED)
                finally:
                    os.close(descriptor)
                return
            buffer = bytearray(_WARM_CHUNK)
            with open(path, "rb", buffering=0) as handle:
                while handle.readinto(buffer):
                    pass
        except OSError as exc:  # the engine's load meets the same file and reports it
            log.debug("warming %s: %s", path, exc)

    if files:
        with ThreadPoolExecutor(max_workers=min(_WARM_THREADS, os.cpu_count() or 1)) as pool:
            list(pool.map(read, files))
    return len(files), time.perf_counter() - started
