"""Seal-time checksums of a shard's sealed segments: sizes checked on open, content by verify.

A sealed segment is immutable in the files that hold its data: the seal writes its vectors,
int8 vectors, payload pages, sparse index and id mappings once, and later deletes only flip
flags in other files. So each seal records, in the shard folder's :data:`MANIFEST` (beside
the engine's ``edge_config.json``; the engine ignores files it does not know), every sealed
segment's data files (:data:`CONTENT`) with their sizes and a BLAKE2b digest, and the
number of points it held.

- On open (:func:`require_sound`, every load): each listed segment is there and its data
  files have their recorded sizes. ``stat`` only, no read: a few hundred calls at 1M chunks.
  A removed segment folder would otherwise go unnoticed (the engine loads what is left and
  serves fewer chunks with exit 0).
- On ``kbsync verify`` (:func:`damage`): the same, plus every data file read and hashed
  (~0.3 s a segment of 20,000 chunks), so bit rot that keeps sizes is named by segment and
  file (the engine would score it ``nan`` or fail its LZ4 decoding).

Limits, on purpose:

- which files are data files was measured with qdrant-edge-py 0.9.0
  (``tests/store/test_edge_seals.py`` checks that deletes, overwrites and payload updates
  leave them unchanged); the flag, tracker and version files change in place and are
  not hashed;
- the engine removes sealed segments itself: an ``optimize()`` may replace them
  (vacuuming deleted points), and a segment whose every point was overwritten or deleted
  is dropped. So every seal, optimize, flush and close of kbsync updates the manifest
  under the shard's write lock (:func:`record`): a segment gone then went while this
  process held the store. A process killed before that leaves a listed segment gone: with
  an unlisted one new (an optimize) it is not reported (logged); alone, it is reported as
  missing, and ``kbsync verify --repair`` forgets it and rebuilds what the records miss
  (nothing, when the engine had emptied it);
- segments sealed before this manifest existed are listed at the next seal (their content
  is then taken as sound);
- a segment folder removed while a process holds the store open is dropped from the list
  at that process's close, like one the engine emptied (the two look alike then).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kbsync.errors import StoreDamaged
from kbsync.store.edge.check import is_appendable

log = logging.getLogger(__name__)

MANIFEST = "kbsync-seals.json"
"""The manifest's name in a shard folder."""

CONTENT = ("vector_storage-*/matrix.dat", "vector_storage-*/quantized.data",
           "vector_storage-*/store/page_*.dat", "payload_storage/page_*.dat",
           "vector_index-*/inverted_index.dat", "id_tracker.i2e", "id_tracker.e2i")
"""Glob patterns (relative to a segment) of the files a sealed segment never rewrites."""

_VERSION = 1
_READ = 1 << 20
_VERSION_BYTES = 8  # id_tracker.versions: 8 bytes a point


@dataclass(frozen=True)
class Damage:
    """One damaged sealed segment: which, the file (``""``: the whole segment) and how."""

    collection: str
    segment: str
    file: str
    problem: str

    def __str__(self) -> str:
        where = f"{self.file} " if self.file else ""
        return f"sealed segment {self.segment}: {where}{self.problem}"

    def to_dict(self) -> dict:
        """JSON form (``kbsync verify --json``'s ``damaged`` entries)."""
        return {"collection": self.collection, "segment": self.segment, "file": self.file,
                "problem": self.problem}


def sealed_segments(folder: Path) -> dict[str, Path]:
    """The sealed segments of the shard at ``folder``, by name."""
    return {s.name: s for s in sorted((folder / "segments").glob("*/"))
            if (s / "segment.json").is_file() and not is_appendable(s)}


def _digest(path: Path) -> str:
    digest = hashlib.blake2b(digest_size=16)
    with path.open("rb", buffering=0) as handle:
        buffer = bytearray(_READ)
        view = memoryview(buffer)
        while True:
            read = handle.readinto(buffer)
            if not read:
                return digest.hexdigest()
            digest.update(view[:read])


def describe(segment: Path) -> dict:
    """A sealed segment's manifest entry: ``{"points": n, "files": {rel: [size, digest]}}``."""
    files = {}
    for pattern in CONTENT:
        for path in sorted(segment.glob(pattern)):
            files[path.relative_to(segment).as_posix()] = [path.stat().st_size, _digest(path)]
    try:
        points = (segment / "id_tracker.versions").stat().st_size // _VERSION_BYTES
    except OSError:
        points = 0
    return {"points": points, "files": files}


def read(folder: Path) -> dict[str, dict]:
    """The listed segments of the shard at ``folder`` (``{}``: none, or no manifest).

    An unreadable manifest is logged and taken as none (the engine's own checks remain).
    """
    path = folder / MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        segments = data["segments"]
        if not isinstance(segments, dict):
            raise TypeError("segments is not an object")
        return segments
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("the seal manifest %s cannot be read (%s): its segments are not checked "
                    "until the next seal lists them again", path, exc)
        return {}


def _write(folder: Path, segments: dict[str, dict]) -> None:
    """Replace the manifest atomically (a crash leaves the old one or the new one)."""
    body = json.dumps({"version": _VERSION, "segments": segments}, sort_keys=True)
    handle, temp = tempfile.mkstemp(prefix=f".{MANIFEST}.", dir=folder)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(body)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, folder / MANIFEST)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def record(folder: Path, *, add: bool = True) -> list[str]:
    """List the sealed segments of ``folder`` not listed yet (``add``), and drop the listed
    ones gone.

    Call right after the engine sealed or optimized (``add``: what it made is hashed), or
    flushed or closed (``add=False``: nothing is read, so a close stays cheap even on a
    store sealed before this list existed), under the shard's write lock: a segment gone
    then went while this process held the store. Returns the segments added.
    """
    listed = read(folder)
    present = sealed_segments(folder)
    kept = {name: entry for name, entry in listed.items() if name in present}
    added = [name for name in present if name not in kept] if add else []
    for name in added:
        kept[name] = describe(present[name])
    if added or len(kept) != len(listed):
        _write(folder, kept)
        log.debug("seal manifest of %s: %d segments listed, %d added", folder, len(kept),
                  len(added))
    return added


def forget(folder: Path, segments: list[str]) -> None:
    """Drop ``segments`` from the manifest (``verify --repair`` set them aside)."""
    listed = read(folder)
    _write(folder, {k: v for k, v in listed.items() if k not in set(segments)})


def _check(collection: str, folder: Path, *, content: bool) -> list[Damage]:
    """What is wrong with the listed segments of ``folder`` (``content``: hash the files)."""
    found: list[Damage] = []
    present = sealed_segments(folder)
    listed = read(folder)
    gone = [name for name in listed if name not in present]
    if gone and set(present) - set(listed):
        log.warning("edge collection %s: sealed segment(s) %s replaced by an optimize that "
                    "was not recorded (a process killed meanwhile?); `kbsync verify` compares "
                    "the points with the state records", collection, ", ".join(gone))
        gone = []
    for name in gone:
        points = int(listed[name].get("points") or 0)
        found.append(Damage(collection, name, "", f"is missing ({points} points)"))
    for name, entry in sorted(listed.items()):
        if name not in present:
            continue
        for relative, (size, digest) in sorted((entry.get("files") or {}).items()):
            path = present[name] / relative
            try:
                actual = path.stat().st_size
            except OSError:
                found.append(Damage(collection, name, relative, "is missing"))
                continue
            if actual != size:
                found.append(Damage(collection, name, relative,
                                    f"has {actual} bytes, sealed with {size}"))
            elif content and _digest(path) != digest:
                found.append(Damage(collection, name, relative,
                                    "changed since the seal (checksum differs)"))
    return found


def damage(collection: str, folder: Path) -> list[Damage]:
    """Every damaged listed segment of the shard at ``folder``, content read and hashed."""
    return _check(collection, folder, content=True)


def require_sound(folder: Path, name: str) -> None:
    """Check the listed segments' presence and sizes before the engine loads the shard.

    Raises:
        StoreDamaged: a listed segment is gone or a data file's size changed; names the
            first and ``kbsync verify --repair``.
    """
    found = _check(name, folder, content=False)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise StoreDamaged(
            f"edge store: collection {name!r} at {folder} is damaged: {found[0]}{more}; "
            "serving it would miss chunks or score them wrongly: `kbsync verify --repair` "
            "sets the damage aside and rebuilds it from the files")
