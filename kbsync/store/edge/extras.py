"""The embedded adapter's methods beyond writes and searches: paging, payloads by id, the
revision (write counter) of :mod:`kbsync.store.memo`, sealing, optimizing,
flushing, listing and dropping collections.

Split from ``edge.py`` (which keeps the folder lock, the handles, writes and searches) as a
base class of :class:`~kbsync.store.edge.store.EdgeStore`; as there, writes into a shard hold its
lock and reads pass its gate (:mod:`kbsync.store.edge.shard_gate`).
"""

from __future__ import annotations

import functools
import json
import logging
import shutil
import threading
from pathlib import Path
from typing import Any, Callable, Iterator, Self, Sequence, TypeVar

import qdrant_edge as qe

from kbsync import home
from kbsync.errors import KbsyncError
from kbsync.store import layout
from kbsync.store.edge import seals
from kbsync.store.edge import query as eq
from kbsync.store.edge import seal as es
from kbsync.store import validate as cv
from kbsync.store.base import DENSE, Filter, Point
from kbsync.store.edge.query import errors as _errors
from kbsync.store.edge.query import to_edge_filter
from kbsync.store.edge.seal import Shard
from kbsync.store.memo import Revision

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])


def writes(method: F) -> F:
    """Count the call as a write in the store's :meth:`~EdgeExtras.revision` (begun before
    the engine is touched, ended after it returned or failed)."""
    @functools.wraps(method)
    def counted(self: "EdgeExtras", *args: Any, **kwargs: Any) -> Any:
        self._revision.begin()
        try:
            return method(self, *args, **kwargs)
        finally:
            self._revision.end()
    return counted  # type: ignore[return-value]


def _vector_of(record: Any) -> list[float] | None:
    vec = record.vector
    if isinstance(vec, dict):
        vec = vec.get(DENSE)
    return list(vec) if vec is not None else None


class EdgeExtras:
    """Paging and upkeep of :class:`~kbsync.store.edge.store.EdgeStore` (see there)."""

    path: Path
    _lock: threading.Lock
    _shards: dict[str, Shard]
    _revision: Revision

    def revision(self) -> int | None:
        """How many writes this store has started (``None`` while one is in flight): the
        stamp of :mod:`kbsync.store.memo`. Complete, because this object holds the
        folder's lock for its whole life: no other process writes these files meanwhile."""
        return self._revision.value()

    def _folder(self, name: str) -> Path:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r})"

    def _get(self, name: str) -> Shard | None:
        raise NotImplementedError

    def _require(self, name: str) -> Shard:
        raise NotImplementedError

    def _writable(self, what: str) -> None:
        raise NotImplementedError

    def scroll(
        self, name: str, flt: Filter | None = None, *, with_payload: bool = True,
        with_vectors: bool = False, page_size: int = 1024,
    ) -> Iterator[Point]:
        """Iterate over matching points in id order, one engine call per page.

        Points written or deleted while iterating may or may not be seen.
        """
        offset: str | None = None
        while True:
            points, offset = self.scroll_page(name, flt, offset=offset, limit=page_size,
                                              with_payload=with_payload,
                                              with_vectors=with_vectors)
            yield from points
            if offset is None:
                return

    def scroll_page(
        self, name: str, flt: Filter | None = None, *, offset: str | None = None,
        limit: int = 1024, with_payload: bool = True, with_vectors: bool = False,
    ) -> tuple[list[Point], str | None]:
        """One page of :meth:`scroll` from ``offset`` (a point id, ``None``: the start).

        Returns the points and the offset of the next page (``None`` after the last);
        ``([], None)`` when the collection is missing. The relay serves scrolls this way.
        """
        cv.check_limit(limit, "page_size")
        edge_filter = to_edge_filter(flt)
        start = None if offset is None else cv.check_point_id(offset)
        handle = self._get(name)
        if handle is None:
            return [], None
        request = qe.ScrollRequest(
            offset=start, limit=limit, filter=edge_filter,
            with_payload=with_payload, with_vector=[DENSE] if with_vectors else False,
        )
        with handle.gate.reading(name), _errors("scroll", name):
            records, following = handle.shard.scroll(request)
        points = [Point(id=str(rec.id), payload=(rec.payload or {}) if with_payload else {},
                        vector=_vector_of(rec) if with_vectors else None) for rec in records]
        return points, None if following is None else str(following)

    def payloads(self, name: str, ids: Sequence[str]) -> dict[str, dict]:
        """The payloads of the points ``ids`` that exist, by id (``{}`` when missing)."""
        return {str(rec.id): rec.payload or {} for rec in self._retrieved(name, ids)}

    def payload_list(self, name: str, ids: Sequence[str]) -> list[dict]:
        """The payloads of the points ``ids`` that exist, in no given order and without
        their ids (a state record names its document: a plan slice needs no id, and
        spelling 5,000 of them costs it more than the read)."""
        return [rec.payload or {} for rec in self._retrieved(name, ids)]

    def _retrieved(self, name: str, ids: Sequence[str]) -> list:
        checked = cv.check_ids(ids)
        handle = self._get(name)
        if handle is None or not checked:
            return []
        with handle.gate.reading(name), _errors("retrieve", name):
            return handle.shard.retrieve(list(checked), with_payload=True, with_vector=False)

    # --- extras -------------------------------------------------------------
    def seal(self, name: str) -> dict:
        """Seal collection ``name``'s appendable segment if it holds ``SEAL_EVERY`` points or
        more (a store made before sealed segments, or one killed before its seal).

        Returns ``{"points": sealed, "seconds": spent}`` (0 points: nothing was due); a
        missing collection seals nothing. Blocking: one engine call per segment due.
        """
        self._writable(f"sealing collection {name!r}")
        handle = self._get(name)
        if handle is None:
            return {"points": 0, "seconds": 0.0}
        if self.unwritten() and handle.unsealed < layout.SEAL_EVERY:
            # Nothing written since the open, no full segment: the flush and optimize would
            # find nothing to do (~8 ms a collection of every run's first step, issue 42).
            return {"points": 0, "seconds": 0.0}
        with handle.lock:
            return es.seal_reported(handle, name, self._folder(name))

    def optimize(self, name: str | None = None) -> bool:
        """Vacuum deleted points, merge and seal segments (all open collections when ``name``
        is None).

        No HNSW graph is built (``seal.hnsw_config``: m=0). Blocking and
        GIL-holding, for about a copy of the segments it rewrites: not on a request path.
        Returns whether anything was optimized.
        """
        self._writable("optimizing")
        with self._lock:
            targets = list(self._shards.items()) if name is None else []
        if name is not None:
            targets = [(name, self._require(name))]
        changed = False
        for cname, handle in targets:
            with handle.lock:
                with _errors("optimize", cname):
                    changed = bool(handle.shard.optimize()) or changed
                es.record_seals(self._folder(cname), cname)  # it may have replaced segments
        return changed

    def flush(self) -> None:
        """Flush every open collection to disk."""
        with self._lock:
            targets = list(self._shards.items())
        for cname, handle in targets:
            with handle.lock:
                with _errors("flush", cname):
                    handle.shard.flush()
                es.record_seals(self._folder(cname), cname, add=False)

    # --- collections (kbsync rebuild) --------------------------------------------
    def collection_names(self) -> list[str]:
        """Every collection in the store folder (a folder holding a shard config)."""
        return sorted(p.name for p in self.path.iterdir() if (p / eq.CONFIG_FILE).is_file())

    @writes
    def drop_collection(self, name: str) -> None:
        """Close and delete collection ``name`` (missing: nothing happens)."""
        self._writable(f"dropping collection {name!r}")
        folder = self._folder(name)
        with self._lock:
            handle = self._shards.pop(name, None)
        if handle is not None:
            with handle.lock, _errors("close", name):
                handle.gate.closing()
                handle.shard.close()
        if folder.exists():
            shutil.rmtree(folder)

    # --- damage (kbsync verify) ----------------------------------------------------
    def damaged_segments(self, name: str) -> list[seals.Damage]:
        """The sealed segments of ``name`` whose files differ from their seal (read and
        hashed, :func:`kbsync.store.edge.seals.damage`); ``[]`` when it does not exist.
        Reads files only: a shard the engine cannot open is checked too."""
        folder = self._folder(name)
        if not (folder / eq.CONFIG_FILE).is_file():
            return []
        return seals.damage(name, folder)

    @writes
    def set_aside_segments(self, name: str, damaged: list[seals.Damage], aside: Path
                           ) -> list[str]:
        """Move the segments of ``damaged`` out of collection ``name`` into
        ``aside/segments/`` (kept, never deleted), with ``aside/damage.json`` saying why,
        and drop them from the seal manifest; returns the segments set aside.

        The shard is closed first (the engine maps their files); the next read opens it
        without them, so the points they held count as missing and ``kbsync verify
        --repair`` rebuilds their documents from the files.
        """
        self._writable(f"setting aside segments of collection {name!r}")
        folder = self._folder(name)
        segments = sorted({d.segment for d in damaged})
        self.release(name)
        home.make_dir(aside / "segments")
        (aside / "damage.json").write_text(
            json.dumps([d.to_dict() for d in damaged], indent=1) + "\n", encoding="utf-8")
        for segment in segments:
            source = folder / "segments" / segment
            if source.is_dir():
                source.rename(aside / "segments" / segment)
        seals.forget(folder, segments)
        log.warning("edge collection %s: damaged sealed segment(s) %s set aside in %s", name,
                    ", ".join(segments), aside)
        return segments

    def release(self, name: str) -> None:
        """Close collection ``name``'s shard if it is open (flushed first when it can be);
        the next call opens it again. Its folder may then be moved."""
        with self._lock:
            handle = self._shards.pop(name, None)
        if handle is None:
            return
        with handle.lock:
            handle.gate.closing()
            try:
                with _errors("flush", name):
                    handle.shard.flush()
            except KbsyncError as exc:  # a damaged shard may not flush: it is set aside
                log.warning("edge collection %s: flush before closing failed: %s", name, exc)
            with _errors("close", name):
                handle.shard.close()
            es.record_seals(self._folder(name), name, add=False)

    def _ensured(self, name: str, dimension: int, sparse: bool, keyword_indexes: Sequence[str],
                 bool_indexes: Sequence[str], integer_indexes: Sequence[str]) -> bool:
        """Whether collection ``name`` has ``dimension``, the sparse vector when ``sparse``
        and every index named: then ``ensure_collection`` has nothing to write, and counts
        no write, so a run that writes nothing leaves its store :meth:`unwritten`."""
        handle = self._get(name)
        if handle is None or handle.dimension != dimension or (sparse and not handle.sparse):
            return False  # the write path creates, adds, or raises DimensionMismatch
        with handle.lock, _errors("create index", name):
            existing = set(handle.shard.info().payload_schema)
        return not eq.index_operations(existing, keyword_indexes, bool_indexes, integer_indexes)

    def unwritten(self) -> bool:
        """No write was started through this store since it opened (none can have come
        from elsewhere: it holds the folder's lock): its shards hold what they held at the
        open, so a flush has nothing to write (a WAL replayed at the open is replayed
        again at the next one, as it was written)."""
        return self._revision.value() == 0

    def _flush_quietly(self) -> None:
        if self.unwritten():
            return
        try:
            self.flush()
        except KbsyncError as exc:  # close() flushes again and raises it then
            log.debug("flush before stopping the relay failed: %s", exc)
