"""The embedded adapter: qdrant-edge-py (pinned to 0.9.0; its API still moves).

Each collection is one EdgeShard folder ``<path>/<name>/``. The engine allows
one open handle per folder, so an ``EdgeStore`` takes an exclusive lock on
``<path>/.lock`` for its whole life: a second store on the same folder (in
this process or another) fails at once with ``StoreUnavailable`` instead of
failing on its first write.

Prefect runs tasks in threads sharing one store, and the relay serves other processes
from it. Writes into a shard hold that shard's lock; reads do not wait for them, only
for a close (:mod:`kbsync.store.edge.shard_gate` says why the engine allows it).

Facts about qdrant-edge-py 0.9.0 this module relies on (checked by
``tests/store/test_conformance.py``):

- it raises bare ``Exception`` with a message; we translate by message;
- the shard config is persisted in ``<folder>/edge_config.json`` (documented),
  which is where the dimension of an existing collection is read from;
- ``MatchValue(True)`` never matches a stored bool (see ``query``, which
  holds the filter, config and query translation);
- there is no background optimizer and ``optimize()`` holds the GIL: the store seals
  its appendable segment itself every ``layout.SEAL_EVERY`` points (immutable,
  mapped, int8-quantized, no HNSW graph), inside the upsert that fills it, so no
  single call seals more than one segment's worth (see :mod:`kbsync.store.edge.seal`).

Paging, sealing, optimizing, flushing and dropping collections live in
:mod:`kbsync.store.edge.extras` (a base class of ``EdgeStore``).

Hybrid search: a collection made with ``sparse=True`` has the ``SPARSE``
vector (IDF modifier) in its ``sparse_vectors``; an older shard gets it added
by ``UpdateOperation.create_sparse_vector`` (existing points keep no sparse
vector until they are written again).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any, Sequence

import qdrant_edge as qe

from kbsync import home
from kbsync.store.edge import diskspace
from kbsync.errors import (DimensionMismatch, KbsyncError, StoreError,
                           StoreFailure, StoreReadOnly, StoreUnavailable)
from kbsync.store import validate as cv
from kbsync.store.edge import query as eq
from kbsync.store.edge import seal as es
from kbsync.store.edge.check import READ_ONLY_ERRNOS, read_only
from kbsync.store.edge.readonly import PrivateCopies, refuse_write
from kbsync.store.edge.extras import EdgeExtras, writes
from kbsync.store.memo import Revision
from kbsync.store.edge.seal import Shard as _Shard
from kbsync.models import SparseVec
from kbsync.store.base import Filter, Point, ScoredPoint
from kbsync.store.edge.query import errors as _errors
from kbsync.store.edge.query import to_edge_filter

__all__ = ["EdgeStore", "to_edge_filter"]

try:  # POSIX only; elsewhere the engine's own WAL lock still refuses a second handle
    import fcntl
except ImportError:  # pragma: no cover - not exercised on Linux CI
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

_CONFIG_FILE = eq.CONFIG_FILE
_LOCK_FILE = ".lock"
_WRITE_BATCH = 1024  # points per update call: bounds one call's memory, not durability
# The engine flushes only when asked and truncates its WAL only then: unflushed, the WAL
# held ~6.4 KB a chunk (128 MiB for 20k; 6 GB at 1M), and a crash replays all of it.
_FLUSH_EVERY = 65_536  # points upserted into a shard between flushes (~1 s each)


class EdgeStore(EdgeExtras):
    """:class:`~kbsync.store.base.VectorStore` over the embedded Qdrant Edge engine.

    Invariants: one ``EdgeStore`` per ``path`` at a time (exclusive lock held
    until :meth:`close`); collections are cosine, one named dense vector
    ``DENSE``; writes are validated before they reach the engine. Reads on a
    missing collection return nothing; writes on one raise ``StoreError``.
    """

    def __init__(self, path: Path) -> None:
        """Open (creating if needed) the store folder and lock it.

        A folder this process cannot write (a read-only mount, no write permission) is
        opened for reading: each collection is read from a private copy and every write
        is refused (:mod:`kbsync.store.edge.readonly`).

        Raises:
            StoreUnavailable: another store holds the folder.
            StoreReadOnly: the folder cannot be written and there is nothing to read
                (no store there), or its lock file cannot be read.
            StoreError: the folder cannot be created or locked.
        """
        self.path = Path(path)
        self._revision = Revision()  # every write counted: see revision()
        self._shards: dict[str, _Shard] = {}
        self._lock = threading.Lock()  # guards _shards and _closed
        self._closed = False
        self._relay: Any = None  # kbsync.store.edge.relay.RelayServer while serving readers
        self._copies: PrivateCopies | None = None  # set when the folder cannot be written
        self._copy_of: dict[str, Path] = {}  # collection -> its private copy
        # Under the home's umask from here on: the engine writes its own files (0600).
        home.use_umask()
        try:
            home.make_dir(self.path)
            # A file object (not a bare fd): if the store is never closed, garbage
            # collection still closes it and so releases the lock.
            self._lock_file: Any = open(self.path / _LOCK_FILE, "a+b")  # noqa: SIM115
        except OSError as exc:
            if exc.errno not in READ_ONLY_ERRNOS:
                raise StoreError(
                    f"edge store: cannot open store folder {self.path}: {exc}") from exc
            self._lock_file = self._open_for_reading(exc.strerror or str(exc))
        if fcntl is not None and self._lock_file is not None:
            try:
                fcntl.flock(self._lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                self._lock_file.close()
                raise StoreUnavailable(
                    f"edge store at {self.path} is in use by another process or store "
                    "(the embedded engine allows one writer per folder; close it, or use a "
                    "Qdrant server via KBSYNC_QDRANT_URL)"
                ) from exc

    def _open_for_reading(self, cause: str) -> Any:
        """The lock file opened read-only (``flock`` holds on it, so no writer changes the
        files while they are copied), or ``None`` when there is none (a store on a
        read-only mount: no writer can exist). Marks the store read through copies.

        Raises:
            StoreReadOnly: no store folder to read, or a lock file that cannot be read.
        """
        if not self.path.is_dir():
            raise read_only(self.path, cause)
        try:
            lock_file = open(self.path / _LOCK_FILE, "rb")  # noqa: SIM115
        except FileNotFoundError:
            lock_file = None
        except OSError as exc:
            raise read_only(self.path, f"{cause}; lock file: {exc.strerror}") from exc
        self._copies = PrivateCopies(self.path, cause)
        return lock_file

    def _writable(self, what: str) -> None:
        """Refuse a write on a store read through private copies."""
        if self._copies is not None:
            raise refuse_write(self.path, what)

    # --- handles ------------------------------------------------------------
    def _folder(self, name: str) -> Path:
        """Collection ``name``'s folder: its private copy once it has one."""
        checked = cv.check_collection_name(name)
        return self._copy_of.get(checked) or self.path / checked

    def _get(self, name: str) -> _Shard | None:
        """The open shard for ``name``, loading it on first use; ``None`` if missing."""
        folder = self._folder(name)
        with self._lock:
            if self._closed:
                raise StoreError(f"edge store at {self.path} is closed")
            handle = self._shards.get(name)
            if handle is not None:
                return handle
            if not (folder / _CONFIG_FILE).is_file():
                return None
            dimension, sparse = eq.read_config(folder, name)
            shard = self._load(folder, name, dimension, sparse)
            with _errors("load", name):
                unsealed = es.unsealed_points(shard, folder)
            handle = self._shards[name] = _Shard(shard, dimension, sparse, unsealed=unsealed)
            return handle

    def _load(self, folder: Path, name: str, dimension: int, sparse: bool) -> Any:
        """The engine's shard of ``folder``; from a private copy when the store cannot be
        written (found at open, or here when only the collection's files refuse it)."""
        if self._copies is None:
            diskspace.require_open(folder, name)  # on a full tmpfs, opening would SIGBUS
            try:
                return es.load_shard(folder, name,
                                     es.load_config(folder, dimension, sparse=sparse))
            except StoreReadOnly as exc:
                if self._shards:  # written through already: never mix in a copy
                    raise
                self._copies = PrivateCopies(self.path, "its segments' files refuse writes")
                log.debug("edge collection %s: %s", name, exc)
        copy = self._copy_of[name] = self._copies.copy(folder, name)
        diskspace.require_open(copy, name)
        return es.load_shard(copy, name, es.load_config(copy, dimension, sparse=sparse))

    def _require(self, name: str) -> _Shard:
        handle = self._get(name)
        if handle is None:
            raise StoreError(
                f"edge store: collection {name!r} does not exist (call ensure_collection first)"
            )
        return handle

    # --- VectorStore --------------------------------------------------------
    def ensure_collection(
        self, name: str, *, dimension: int, keyword_indexes: Sequence[str] = (),
        sparse: bool = False, bool_indexes: Sequence[str] = (),
        integer_indexes: Sequence[str] = (),
    ) -> None:
        """Create the collection if missing, else check its dimension; add missing indexes.

        Keyword indexes named in ``TENANT_KEYS`` (``namespace``) are tenant indexes;
        ``bool_indexes`` get bool indexes, ``integer_indexes`` range indexes; all mapped in
        sealed segments (``seal.INDEX_MEMORY``). ``sparse=True`` creates (or adds to an
        existing shard) the IDF sparse vector. A collection that has all of it is only read
        (:meth:`_ensured`: no write counted).

        Raises:
            DimensionMismatch: the existing collection has another dimension.
        """
        cv.check_dimension(dimension)
        self._writable(f"writing collection {name!r}")
        if not self._ensured(name, dimension, sparse, keyword_indexes, bool_indexes,
                             integer_indexes):
            self._complete(name, dimension, keyword_indexes, sparse, bool_indexes,
                           integer_indexes)

    @writes
    def _complete(self, name: str, dimension: int, keyword_indexes: Sequence[str],
                  sparse: bool, bool_indexes: Sequence[str],
                  integer_indexes: Sequence[str]) -> None:
        """:meth:`ensure_collection`'s writes."""
        handle = self._get(name)
        if handle is None:
            folder = self._folder(name)
            config = es.collection_config(dimension, sparse=sparse)
            with self._lock:
                if self._closed:
                    raise StoreError(f"edge store at {self.path} is closed")
                handle = self._shards.get(name)
                if handle is None:
                    diskspace.require_create(folder, name)
                    with _errors("create", name):
                        shard = qe.EdgeShard.create(str(folder), config)
                    handle = self._shards[name] = _Shard(shard, dimension, sparse)
                    log.info("created edge collection %s (dim %d%s) at %s", name, dimension,
                             ", sparse" if sparse else "", folder)
        if handle.dimension != dimension:
            raise DimensionMismatch(
                f"collection {name!r} has dimension {handle.dimension}, requested {dimension} "
                "(embedding model changed? use another collection or re-create it)"
            )
        if sparse and not handle.sparse:
            with handle.lock, _errors("add sparse vector", name):
                if not handle.sparse:
                    handle.shard.update(eq.add_sparse_operation())
                    handle.sparse = True
                    log.warning("added sparse vector to edge collection %s: chunks written "
                                "before now have no BM25 vector until re-ingested", name)
        with handle.lock, _errors("create index", name):
            existing = set(handle.shard.info().payload_schema)
            for operation in eq.index_operations(existing, keyword_indexes, bool_indexes,
                                                  integer_indexes, memory=es.INDEX_MEMORY):
                handle.shard.update(operation)

    def collection_dimension(self, name: str) -> int | None:
        """The dense dimension of ``name``, or ``None`` when it does not exist."""
        handle = self._get(name)
        return None if handle is None else handle.dimension

    @writes
    def upsert(self, name: str, points: Sequence[Point]) -> None:
        """Insert or replace points after validating the whole batch.

        Raises:
            StoreError: the collection does not exist.
            DimensionMismatch, InvalidVector, UsageError: see ``validate.validate_points``.
        """
        self._writable(f"writing collection {name!r}")
        handle = self._require(name)
        valid = cv.validate_points(points, handle.dimension)
        if not handle.sparse and any(p.sparse is not None for p in valid):
            raise eq.no_sparse_error(name)
        for start in range(0, len(valid), _WRITE_BATCH):
            batch = [eq.edge_point(p) for p in valid[start:start + _WRITE_BATCH]]
            with handle.lock:
                with _errors("upsert", name):
                    handle.shard.update(qe.UpdateOperation.upsert_points(batch))
                es.after_upsert(handle, name, self._folder(name), len(batch), _FLUSH_EVERY)

    @writes
    def delete_ids(self, name: str, ids: Sequence[str]) -> None:
        """Delete points by id; unknown ids and a missing collection are ignored."""
        checked = cv.check_ids(ids)
        self._writable(f"deleting from collection {name!r}")
        handle = self._get(name)
        if handle is None or not checked:
            return
        with handle.lock, _errors("delete ids", name):
            handle.shard.update(qe.UpdateOperation.delete_points(list(checked)))

    @writes
    def delete(self, name: str, flt: Filter) -> None:
        """Delete every point matching ``flt``.

        Raises:
            UsageError: ``flt`` has no conditions (it would wipe the collection).
        """
        edge_filter = to_edge_filter(cv.require_conditions(flt))
        self._writable(f"deleting from collection {name!r}")
        handle = self._get(name)
        if handle is None:
            return
        with handle.lock, _errors("delete", name):
            handle.shard.update(qe.UpdateOperation.delete_points_by_filter(edge_filter))

    @writes
    def set_payload(self, name: str, flt: Filter, payload: dict[str, Any]) -> None:
        """Set ``payload``'s keys on every point matching ``flt`` (``UsageError``: no
        conditions). The engine moves an updated point out of a sealed segment (copy on
        write), so the points count as written for the seal rule."""
        edge_filter = to_edge_filter(cv.require_conditions(flt))
        self._writable(f"writing collection {name!r}")
        handle = self._get(name)
        if handle is None:
            return
        with handle.lock:
            with _errors("set payload", name):
                moved = int(handle.shard.count(qe.CountRequest(exact=True, filter=edge_filter)))
                handle.shard.update(qe.UpdateOperation.set_payload_by_filter(edge_filter,
                                                                             dict(payload)))
            es.after_upsert(handle, name, self._folder(name), moved, _FLUSH_EVERY)

    def count(self, name: str, flt: Filter | None = None) -> int:
        """Exact number of matching points (0 when the collection is missing)."""
        edge_filter = to_edge_filter(flt)
        handle = self._get(name)
        if handle is None:
            return 0
        with handle.gate.reading(name), _errors("count", name):
            return int(handle.shard.count(qe.CountRequest(exact=True, filter=edge_filter)))

    def search(
        self, name: str, vector: Sequence[float], *, limit: int,
        flt: Filter | None = None, score_threshold: float | None = None,
        with_payload: bool = True,
    ) -> list[ScoredPoint]:
        """Nearest points by cosine similarity, best first ([] when the collection is missing).

        ``with_payload=False``: hits with empty payloads (fuse on ids and scores, then
        :meth:`payloads` of the few kept).

        Raises:
            DimensionMismatch, InvalidVector: a bad query vector.
        """
        cv.check_limit(limit, "limit")
        threshold = cv.check_score_threshold(score_threshold)
        edge_filter = to_edge_filter(flt)
        handle = self._get(name)
        if handle is None:
            return []
        query = cv.check_query(vector, handle.dimension)
        request = eq.dense_request(query, limit=limit, edge_filter=edge_filter,
                                   score_threshold=threshold, params=es.search_params(),
                                   with_payload=with_payload)
        with handle.gate.reading(name), _errors("search", name):
            hits = handle.shard.query(request)
        return eq.to_scored(hits, name, cosine=True)

    def sparse_search(
        self, name: str, sparse: SparseVec, *, limit: int, flt: Filter | None = None,
        with_payload: bool = True,
    ) -> list[ScoredPoint]:
        """Points by BM25 score ``sum(idf * weight)``, best first ([] when missing;
        ``with_payload`` as in :meth:`search`).

        Raises:
            StoreError: the collection has no sparse vector.
            InvalidVector: a malformed sparse query.
        """
        cv.check_limit(limit, "limit")
        query = eq.check_sparse_query(sparse)
        handle = self._sparse_handle(name)
        if handle is None or not query.indices:
            return []
        request = eq.sparse_request(query, limit=limit, edge_filter=to_edge_filter(flt),
                                    with_payload=with_payload)
        with handle.gate.reading(name), _errors("sparse search", name):
            return eq.to_scored(handle.shard.query(request), name)

    def _sparse_handle(self, name: str) -> _Shard | None:
        handle = self._get(name)
        if handle is not None and not handle.sparse:
            raise eq.no_sparse_error(name)
        return handle

    def serve_readers(self, socket_path: Path) -> bool:
        """Serve read-only calls of other processes on ``socket_path`` until :meth:`close`.

        See :mod:`kbsync.store.edge.relay`. A relay that cannot start is logged and
        leaves this store working as before (readers then get ``StoreUnavailable``).
        Returns whether the relay runs.
        """
        from kbsync.store.edge.relay import RelayServer

        if self._copies is not None:  # read through private copies: nothing to serve
            return False
        if self._relay is None:
            try:
                self._relay = RelayServer.start(self, Path(socket_path))
            except StoreFailure as exc:
                log.warning("other processes cannot read this store while it is open: %s", exc)
        return self._relay is not None

    def close(self) -> None:
        """Flush and close every shard, then release the folder lock (idempotent).

        A relay keeps serving during the flush (the longest part) and stops before
        the shards close, so readers see at most a short gap with neither.
        """
        relay, self._relay = self._relay, None
        if relay is not None:
            self._flush_quietly()
            relay.stop()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            targets, self._shards = list(self._shards.items()), {}
        first_error: KbsyncError | None = None
        flush = not self.unwritten()  # a no-op run's store has nothing to flush (issue 42)
        for cname, handle in targets:
            try:
                with handle.lock, _errors("close", cname):
                    handle.gate.closing()
                    if flush:
                        handle.shard.flush()
                    handle.shard.close()
                es.record_seals(self._folder(cname), cname, add=False)  # emptied ones go
            except KbsyncError as exc:  # close the others, then report the first failure
                log.error("closing edge collection %s failed: %s", cname, exc)
                first_error = first_error or exc
        if self._lock_file is not None:
            self._lock_file.close()  # closing the file releases the flock
        if self._copies is not None:
            self._copies.remove()
        if first_error is not None:
            raise first_error

