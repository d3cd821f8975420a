"""The server adapter: qdrant-client against a Qdrant server, or its local mode.

``ServerStore.from_url`` talks REST to a server (``KBSYNC_QDRANT_URL``);
``ServerStore.local`` uses qdrant-client's pure-Python local mode
(``QdrantClient(path=...)``), which the conformance tests run against. Local
mode ignores payload indexes (it warns), so none are created there, and it is
not thread-safe, so calls into it are serialised with a lock.

Vendor exceptions are translated at this boundary (``query``, which
also holds the filter and point translation): connection failures, timeouts,
429 and 5xx become ``StoreUnavailable`` (retry), dimension errors
``DimensionMismatch``, the rest ``StoreError``.

Hybrid search: ``sparse=True`` collections carry ``SPARSE``
(``SparseVectorParams(modifier=IDF)``) next to ``DENSE``; an existing collection
gets it through ``create_vector_name`` (servers that lack that endpoint are
told to re-create the collection). Dense and sparse queries run apart; hybrid
search fuses them above the store (:mod:`kbsync.query.fusion`), as for the
embedded engine.

Against a cluster, :class:`~kbsync.store.server.cluster.ClusterConfig` gives new
collections their shards, replication and on-disk layout, and every upsert and
delete its write ordering; every write waits for its result. New collections also get
the embedded store's segment layout (``query.optimizers_config`` and
``quantization_config``: indexed at the seal size, int8 with rescoring on search);
local mode accepts and ignores both.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from pathlib import Path
from typing import Any, Iterator, Sequence

from qdrant_client import QdrantClient, models

from kbsync.errors import DimensionMismatch, StoreError, StoreFailure, StoreUnavailable
from kbsync.store import validate as cv
from kbsync.store.server import query as sq
from kbsync.models import SparseVec
from kbsync.store.base import DENSE, SPARSE, Filter, Point, ScoredPoint
from kbsync.store.server.cluster import ClusterConfig
from kbsync.store.server.query import to_client_filter

__all__ = ["ServerStore", "to_client_filter"]

log = logging.getLogger(__name__)

_WRITE_BATCH = 256  # points per request: 256 x 3072 floats stays well under the 32 MiB body cap


class ServerStore:
    """:class:`~kbsync.store.base.VectorStore` over qdrant-client (server or local mode).

    Invariants: collections are cosine with one named dense vector ``DENSE``;
    writes are validated before any request; reads on a missing collection
    return nothing, writes on one raise ``StoreError``. Dimensions are cached
    per collection after the first lookup (a collection re-created with
    another size behind our back is still caught by the server's own check).
    """

    def __init__(self, client: QdrantClient, cluster: ClusterConfig | None = None) -> None:
        """Wrap ``client``; :meth:`close` closes it. ``cluster``: layout of new collections
        and write ordering (default: :class:`ClusterConfig`'s)."""
        self._client = client
        self._cluster = cluster or ClusterConfig()
        self._ordering = self._cluster.ordering
        self._local = client.init_options.get("path") is not None or (
            client.init_options.get("location") == ":memory:")
        # Local mode keeps numpy arrays and a sqlite handle: not safe across threads.
        self._guard: Any = threading.RLock() if self._local else contextlib.nullcontext()
        self._dims: dict[str, int] = {}
        self._sparse: dict[str, bool] = {}  # filled with _dims from the collection's info
        self._closed = False

    @classmethod
    def from_url(cls, url: str, api_key: str | None = None, *, timeout_s: float = 30.0,
                 cluster: ClusterConfig | None = None) -> "ServerStore":
        """A store on a Qdrant server (REST). Makes no request until first use."""
        try:
            client = QdrantClient(url=url, api_key=api_key, timeout=int(timeout_s),
                                  check_compatibility=False)
        except Exception as exc:  # bad URL and the like
            raise StoreError(f"qdrant: cannot create a client for {url!r}: {exc}") from exc
        return cls(client, cluster)

    @classmethod
    def local(cls, path: Path, *, cluster: ClusterConfig | None = None) -> "ServerStore":
        """A store in qdrant-client's local mode at ``path`` (one instance per folder).

        Local mode accepts and ignores ``cluster`` (one process, no shards).

        Raises:
            StoreUnavailable: another client holds the folder.
        """
        with sq.errors("open local store", str(path)):
            return cls(QdrantClient(path=str(path)), cluster)

    # --- helpers ------------------------------------------------------------
    def _call(self, action: str, name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if self._closed:
            raise StoreError("qdrant store is closed")
        with self._guard, sq.errors(action, name):
            return fn(*args, **kwargs)

    def _read(self, action: str, name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Like :meth:`_call`, but a missing collection yields ``None``."""
        if self._closed:
            raise StoreError("qdrant store is closed")
        with self._guard:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                if sq.is_missing_collection(exc):
                    self._dims.pop(name, None)
                    self._sparse.pop(name, None)
                    return None
                raise sq.translate(exc, action, name) from exc

    def _dimension_or_raise(self, name: str) -> int:
        dim = self.collection_dimension(name)
        if dim is None:
            raise StoreError(
                f"qdrant: collection {name!r} does not exist (call ensure_collection first)"
            )
        return dim

    # --- VectorStore --------------------------------------------------------
    def ensure_collection(
        self, name: str, *, dimension: int, keyword_indexes: Sequence[str] = (),
        sparse: bool = False, bool_indexes: Sequence[str] = (),
        integer_indexes: Sequence[str] = (),
    ) -> None:
        """Create the collection if missing, else check its dimension; create keyword indexes.

        ``namespace`` (``TENANT_KEYS``) gets a tenant keyword index. Index
        creation is idempotent on the server and skipped in local mode.
        ``bool_indexes`` get bool indexes, ``integer_indexes`` range-only integer
        indexes. ``sparse=True`` creates (or adds) the
        IDF sparse vector ``SPARSE``.

        Raises:
            DimensionMismatch: the existing collection has another dimension.
            StoreError: the sparse vector is missing and this server cannot add it.
        """
        cv.check_collection_name(name)
        cv.check_dimension(dimension)
        existing = self.collection_dimension(name)
        if existing is None:
            sparse_config = {SPARSE: self._cluster.sparse_params()} if sparse else None
            try:
                self._call("create", name, self._client.create_collection, name,
                           vectors_config={DENSE: self._cluster.dense_params(dimension)},
                           sparse_vectors_config=sparse_config,
                           optimizers_config=sq.optimizers_config(dimension),
                           quantization_config=sq.quantization_config(),
                           **self._cluster.collection_kwargs())
                log.info("created qdrant collection %s (dim %d%s)", name, dimension,
                         ", sparse" if sparse else "")
            except StoreFailure:
                # Another process may have created it between our check and create.
                existing = self.collection_dimension(name)
                if existing is None:
                    raise
            else:
                existing = self._dims[name] = dimension
                self._sparse[name] = sparse
        if existing != dimension:
            raise DimensionMismatch(
                f"collection {name!r} has dimension {existing}, requested {dimension} "
                "(embedding model changed? use another collection or re-create it)"
            )
        if sparse and not self._sparse.get(name):
            self._add_sparse(name)
        if self._local:
            return
        for key in keyword_indexes:
            schema = models.KeywordIndexParams(
                type=models.KeywordIndexType.KEYWORD,
                is_tenant=True if key in cv.TENANT_KEYS else None,
            )
            self._call("create index", name, self._client.create_payload_index, name, key,
                       field_schema=schema, wait=True)
        for key in bool_indexes:
            self._call("create index", name, self._client.create_payload_index, name, key,
                       field_schema=models.PayloadSchemaType.BOOL, wait=True)
        for key in integer_indexes:
            schema_int = models.IntegerIndexParams(type=models.IntegerIndexType.INTEGER,
                                                   lookup=False, range=True)
            self._call("create index", name, self._client.create_payload_index, name, key,
                       field_schema=schema_int, wait=True)

    def collection_dimension(self, name: str) -> int | None:
        """The dense dimension of ``name``, or ``None`` when it does not exist."""
        cv.check_collection_name(name)
        if name in self._dims:
            return self._dims[name]
        info = self._read("get collection", name, self._client.get_collection, name)
        if info is None:
            return None
        dim = self._dims[name] = sq.dense_size(info, name)
        self._sparse[name] = sq.has_sparse(info, name)
        return dim

    def _add_sparse(self, name: str) -> None:
        """Add ``SPARSE`` to an existing collection, or explain how to re-create it."""
        config = models.SparseVectorNameConfig(
            sparse=models.SparseVectorConfig(modifier=models.Modifier.IDF))
        try:
            self._call("add sparse vector", name, self._client.create_vector_name, name, SPARSE,
                       config, wait=True)
        except StoreUnavailable:
            raise
        except StoreError as exc:
            raise StoreError(
                f"qdrant: collection {name!r} has no sparse vector {SPARSE!r} and the server "
                f"could not add one ({exc}); delete the collection (or set another "
                "KBSYNC_COLLECTION) and re-ingest with --force"
            ) from exc
        self._sparse[name] = True
        log.warning("added sparse vector to qdrant collection %s: chunks written before now "
                    "have no BM25 vector until re-ingested", name)

    def _sparse_dim(self, name: str) -> int | None:
        """The dense dimension of a collection that must hold ``SPARSE`` (None: missing)."""
        dim = self.collection_dimension(name)
        if dim is not None and not self._sparse.get(name):
            raise sq.no_sparse(name)
        return dim

    def upsert(self, name: str, points: Sequence[Point]) -> None:
        """Insert or replace points after validating the whole batch (waits for the write).

        Raises:
            StoreError: the collection does not exist.
            DimensionMismatch, InvalidVector, UsageError: see ``validate.validate_points``.
        """
        valid = cv.validate_points(points, self._dimension_or_raise(name))
        if not self._sparse.get(name) and any(p.sparse is not None for p in valid):
            raise sq.no_sparse(name)
        for start in range(0, len(valid), _WRITE_BATCH):
            batch = [sq.to_point(p) for p in valid[start:start + _WRITE_BATCH]]
            self._call("upsert", name, self._client.upsert, name, points=batch, wait=True,
                       ordering=self._ordering)

    def delete_ids(self, name: str, ids: Sequence[str]) -> None:
        """Delete points by id; unknown ids and a missing collection are ignored."""
        checked = cv.check_ids(ids)
        if not checked:
            return
        self._read("delete ids", name, self._client.delete, cv.check_collection_name(name),
                   points_selector=models.PointIdsList(points=checked), wait=True,
                   ordering=self._ordering)

    def delete(self, name: str, flt: Filter) -> None:
        """Delete every point matching ``flt``.

        Raises:
            UsageError: ``flt`` has no conditions (it would wipe the collection).
        """
        client_filter = to_client_filter(cv.require_conditions(flt))
        self._read("delete", name, self._client.delete, cv.check_collection_name(name),
                   points_selector=models.FilterSelector(filter=client_filter), wait=True,
                   ordering=self._ordering)

    def set_payload(self, name: str, flt: Filter, payload: dict[str, Any]) -> None:
        """Set ``payload``'s keys on every point matching ``flt``.

        Raises:
            UsageError: ``flt`` has no conditions.
        """
        client_filter = to_client_filter(cv.require_conditions(flt))
        self._read("set payload", name, self._client.set_payload, cv.check_collection_name(name),
                   payload=dict(payload), points=models.FilterSelector(filter=client_filter),
                   wait=True, ordering=self._ordering)

    def scroll(
        self, name: str, flt: Filter | None = None, *, with_payload: bool = True,
        with_vectors: bool = False, page_size: int = 1024,
    ) -> Iterator[Point]:
        """Iterate over matching points in id order, one request per page.

        Points written or deleted while iterating may or may not be seen.
        """
        cv.check_limit(page_size, "page_size")
        cv.check_collection_name(name)
        client_filter = to_client_filter(flt)
        offset: Any = None
        while True:
            page = self._read(
                "scroll", name, self._client.scroll, name, scroll_filter=client_filter,
                limit=page_size, offset=offset, with_payload=with_payload,
                with_vectors=[DENSE] if with_vectors else False,
            )
            if page is None:
                return
            records, offset = page
            for rec in records:
                vector = None
                if with_vectors and isinstance(rec.vector, dict):
                    vector = list(rec.vector[DENSE]) if DENSE in rec.vector else None
                yield Point(id=str(rec.id), payload=(rec.payload or {}) if with_payload else {},
                            vector=vector)
            if offset is None:
                return

    def count(self, name: str, flt: Filter | None = None) -> int:
        """Exact number of matching points (0 when the collection is missing)."""
        client_filter = to_client_filter(flt)
        result = self._read("count", name, self._client.count, cv.check_collection_name(name),
                            count_filter=client_filter, exact=True)
        return 0 if result is None else int(result.count)

    def search(
        self, name: str, vector: Sequence[float], *, limit: int,
        flt: Filter | None = None, score_threshold: float | None = None,
    ) -> list[ScoredPoint]:
        """Nearest points by cosine similarity, best first ([] when the collection is missing).

        Raises:
            DimensionMismatch, InvalidVector: a bad query vector.
        """
        cv.check_limit(limit, "limit")
        threshold = cv.check_score_threshold(score_threshold)
        client_filter = to_client_filter(flt)
        dim = self.collection_dimension(name)
        if dim is None:
            return []
        query = cv.check_query(vector, dim)
        result = self._read(
            "search", name, self._client.query_points, name, query=query, using=DENSE,
            query_filter=client_filter, limit=limit, score_threshold=threshold,
            search_params=sq.search_params(), with_payload=True, with_vectors=False,
        )
        return sq.scored(result)

    def sparse_search(
        self, name: str, sparse: SparseVec, *, limit: int, flt: Filter | None = None,
    ) -> list[ScoredPoint]:
        """Points by BM25 score ``sum(idf * weight)``, best first ([] when missing).

        Raises:
            StoreError: the collection has no sparse vector.
            InvalidVector: a malformed sparse query.
        """
        cv.check_limit(limit, "limit")
        query = cv.check_sparse(sparse, what="sparse query")
        client_filter = to_client_filter(flt)
        if self._sparse_dim(name) is None or not query.indices:
            return []
        result = self._read(
            "sparse search", name, self._client.query_points, name,
            query=models.SparseVector(indices=query.indices, values=query.values),
            using=SPARSE, query_filter=client_filter, limit=limit, with_payload=True,
            with_vectors=False,
        )
        return sq.scored(result)

    # --- collections and aliases (kbsync rebuild, kbsync.store.active) ------------
    @property
    def client(self) -> QdrantClient:
        """The qdrant-client handle (aliases are read and swapped through it)."""
        return self._client

    def collection_names(self) -> list[str]:
        """Every collection's name (aliases not included)."""
        with self._guard, sq.errors("list collections", "*"):
            return sorted(c.name for c in self._client.get_collections().collections)

    def drop_collection(self, name: str) -> None:
        """Delete collection ``name`` and its points (missing: nothing happens)."""
        with self._guard, sq.errors("delete collection", name):
            self._client.delete_collection(name)
        self._dims.pop(name, None)
        self._sparse.pop(name, None)

    def close(self) -> None:
        """Close the client (local mode: persist and release the folder lock). Idempotent."""
        if self._closed:
            return
        self._closed = True
        with self._guard, sq.errors("close", "*"):
            self._client.close()

    def __enter__(self) -> "ServerStore":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = self._client.init_options.get("path") or self._client.init_options.get("url")
        return f"ServerStore({where!r})"
