"""The server adapter: qdrant-client against a Qdrant server, or its local mode.

``ServerStore.from_url`` talks REST to a server (``KBSYNC_QDRANT_URL``);
``ServerStore.local`` uses qdrant-client's pure-Python local mode
(``QdrantClient(path=...)``), which the conformance tests run against. Local
mode ignores payload indexes (it warns), so none are created there, and it is
not thread-safe, so calls into it are serialised with a lock.

Vendor exceptions are translated at this boundary: connection failures,
timeouts, 429 and 5xx become ``StoreUnavailable`` (retry), dimension errors
``DimensionMismatch``, the rest ``StoreError``.

Room for hybrid search: the collection's vectors are named, so a sparse
vector (``sparse_vectors_config={"sparse": SparseVectorParams(modifier=IDF)}``)
can be added next to ``DENSE`` without touching existing points.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import httpx
from qdrant_client import QdrantClient, models
from qdrant_client.common.client_exceptions import ResourceExhaustedResponse
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from kbsync.errors import DimensionMismatch, KbsyncError, StoreError, StoreUnavailable
from kbsync.store import _convert as cv
from kbsync.store.base import DENSE, Filter, Match, Point, ScoredPoint

log = logging.getLogger(__name__)

_WRITE_BATCH = 256  # points per request: 256 x 3072 floats stays well under the 32 MiB body cap


def _is_missing_collection(exc: Exception) -> bool:
    """Whether ``exc`` says the collection does not exist (server 404 or local mode)."""
    if isinstance(exc, UnexpectedResponse):
        if exc.status_code != 404:
            return False
        try:  # only Qdrant's own message: a bare 404 can also mean a wrong URL prefix
            error = str(exc.structured()["status"]["error"])
        except (ValueError, KeyError, TypeError):
            return False
        return "Collection" in error and "doesn't exist" in error
    msg = str(exc)
    return isinstance(exc, ValueError) and msg.startswith("Collection") and "not found" in msg


def _translate(exc: Exception, action: str, name: str) -> KbsyncError:
    """Turn a qdrant-client / httpx / local-mode exception into a kbsync error."""
    text = f"qdrant: {action} on collection {name!r} failed: {exc}"
    if isinstance(exc, ResourceExhaustedResponse):
        return StoreUnavailable(f"{text} (retry after {exc.retry_after_s}s)")
    if isinstance(exc, ResponseHandlingException):
        if isinstance(exc.source, (httpx.TransportError, OSError)):
            return StoreUnavailable(f"qdrant: {action} on {name!r}: server unreachable: "
                                    f"{exc.source!r}")
        return StoreError(f"qdrant: {action} on {name!r}: unreadable response: {exc.source}")
    if isinstance(exc, (httpx.TransportError, ConnectionError, TimeoutError)):
        return StoreUnavailable(text)
    if isinstance(exc, UnexpectedResponse):
        if exc.status_code is not None and (exc.status_code == 429 or exc.status_code >= 500):
            return StoreUnavailable(text)
    msg = str(exc)
    if "dimension error" in msg:
        return DimensionMismatch(text)
    if isinstance(exc, RuntimeError) and "already accessed by another instance" in msg:
        return StoreUnavailable(text)
    return StoreError(text)


@contextmanager
def _errors(action: str, name: str) -> Iterator[None]:
    """Translate everything qdrant-client raises; let our own errors through."""
    try:
        yield
    except KbsyncError:
        raise
    except Exception as exc:  # qdrant-client raises many unrelated types
        raise _translate(exc, action, name) from exc


def _condition(match: Match) -> Any:
    """One kbsync Match as a qdrant-client condition."""
    if match.any_of is None:
        return models.FieldCondition(key=match.key, match=models.MatchValue(value=match.value))
    values = list(match.any_of)
    if cv.any_of_kind(values) != "mixed":
        return models.FieldCondition(key=match.key, match=models.MatchAny(any=values))
    # MatchAny takes only all-str or all-int lists: "one of" becomes OR of equalities.
    return models.Filter(should=[
        models.FieldCondition(key=match.key, match=models.MatchValue(value=v)) for v in values
    ])


def to_client_filter(flt: Filter | None) -> models.Filter | None:
    """Translate our filter into ``qdrant_client.models.Filter`` (``None`` when empty)."""
    flt = cv.check_filter(flt)
    if cv.is_empty(flt):
        return None
    return models.Filter(
        must=[_condition(m) for m in flt.must] or None,
        must_not=[_condition(m) for m in flt.must_not] or None,
    )


def _dense_size(info: Any, name: str) -> int:
    """The size of the ``DENSE`` cosine vector in a collection's info."""
    vectors = info.config.params.vectors
    params = vectors.get(DENSE) if isinstance(vectors, dict) else None
    if params is None:
        raise StoreError(f"qdrant: collection {name!r} has no named dense vector {DENSE!r} "
                         "(created by another tool?)")
    if params.distance != models.Distance.COSINE:
        raise StoreError(f"qdrant: collection {name!r} uses {params.distance} distance, not Cosine")
    return int(params.size)


class ServerStore:
    """:class:`~kbsync.store.base.VectorStore` over qdrant-client (server or local mode).

    Invariants: collections are cosine with one named dense vector ``DENSE``;
    writes are validated before any request; reads on a missing collection
    return nothing, writes on one raise ``StoreError``. Dimensions are cached
    per collection after the first lookup (a collection re-created with
    another size behind our back is still caught by the server's own check).
    """

    def __init__(self, client: QdrantClient) -> None:
        """Wrap ``client``; :meth:`close` closes it."""
        self._client = client
        self._local = client.init_options.get("path") is not None or (
            client.init_options.get("location") == ":memory:")
        # Local mode keeps numpy arrays and a sqlite handle: not safe across threads.
        self._guard: Any = threading.RLock() if self._local else contextlib.nullcontext()
        self._dims: dict[str, int] = {}
        self._closed = False

    @classmethod
    def from_url(cls, url: str, api_key: str | None = None, *, timeout_s: float = 30.0
                 ) -> "ServerStore":
        """A store on a Qdrant server (REST). Makes no request until first use."""
        try:
            client = QdrantClient(url=url, api_key=api_key, timeout=int(timeout_s),
                                  check_compatibility=False)
        except Exception as exc:  # bad URL and the like
            raise StoreError(f"qdrant: cannot create a client for {url!r}: {exc}") from exc
        return cls(client)

    @classmethod
    def local(cls, path: Path) -> "ServerStore":
        """A store in qdrant-client's local mode at ``path`` (one instance per folder).

        Raises:
            StoreUnavailable: another client holds the folder.
        """
        with _errors("open local store", str(path)):
            return cls(QdrantClient(path=str(path)))

    # --- helpers ------------------------------------------------------------
    def _call(self, action: str, name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if self._closed:
            raise StoreError("qdrant store is closed")
        with self._guard, _errors(action, name):
            return fn(*args, **kwargs)

    def _read(self, action: str, name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Like :meth:`_call`, but a missing collection yields ``None``."""
        if self._closed:
            raise StoreError("qdrant store is closed")
        with self._guard:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                if _is_missing_collection(exc):
                    self._dims.pop(name, None)
                    return None
                raise _translate(exc, action, name) from exc

    def _dimension_or_raise(self, name: str) -> int:
        dim = self.collection_dimension(name)
        if dim is None:
            raise StoreError(
                f"qdrant: collection {name!r} does not exist (call ensure_collection first)"
            )
        return dim

    # --- VectorStore --------------------------------------------------------
    def ensure_collection(
        self, name: str, *, dimension: int, keyword_indexes: Sequence[str] = ()
    ) -> None:
        """Create the collection if missing, else check its dimension; create keyword indexes.

        ``namespace`` (``TENANT_KEYS``) gets a tenant keyword index. Index
        creation is idempotent on the server and skipped in local mode.

        Raises:
            DimensionMismatch: the existing collection has another dimension.
        """
        cv.check_collection_name(name)
        cv.check_dimension(dimension)
        existing = self.collection_dimension(name)
        if existing is None:
            try:
                self._call("create", name, self._client.create_collection, name,
                           vectors_config={DENSE: models.VectorParams(
                               size=dimension, distance=models.Distance.COSINE)})
                log.info("created qdrant collection %s (dim %d)", name, dimension)
            except StoreError:
                # Another process may have created it between our check and create.
                existing = self.collection_dimension(name)
                if existing is None:
                    raise
            else:
                existing = self._dims[name] = dimension
        if existing != dimension:
            raise DimensionMismatch(
                f"collection {name!r} has dimension {existing}, requested {dimension} "
                "(embedding model changed? use another collection or re-create it)"
            )
        if self._local:
            return
        for key in keyword_indexes:
            schema = models.KeywordIndexParams(
                type=models.KeywordIndexType.KEYWORD,
                is_tenant=True if key in cv.TENANT_KEYS else None,
            )
            self._call("create index", name, self._client.create_payload_index, name, key,
                       field_schema=schema, wait=True)

    def collection_dimension(self, name: str) -> int | None:
        """The dense dimension of ``name``, or ``None`` when it does not exist."""
        cv.check_collection_name(name)
        if name in self._dims:
            return self._dims[name]
        info = self._read("get collection", name, self._client.get_collection, name)
        if info is None:
            return None
        dim = self._dims[name] = _dense_size(info, name)
        return dim

    def upsert(self, name: str, points: Sequence[Point]) -> None:
        """Insert or replace points after validating the whole batch (waits for the write).

        Raises:
            StoreError: the collection does not exist.
            DimensionMismatch, InvalidVector, UsageError: see ``_convert.validate_points``.
        """
        valid = cv.validate_points(points, self._dimension_or_raise(name))
        for start in range(0, len(valid), _WRITE_BATCH):
            batch = [models.PointStruct(id=p.id, vector={DENSE: p.vector}, payload=p.payload)
                     for p in valid[start:start + _WRITE_BATCH]]
            self._call("upsert", name, self._client.upsert, name, points=batch, wait=True)

    def delete_ids(self, name: str, ids: Sequence[str]) -> None:
        """Delete points by id; unknown ids and a missing collection are ignored."""
        checked = cv.check_ids(ids)
        if not checked:
            return
        self._read("delete ids", name, self._client.delete, cv.check_collection_name(name),
                   points_selector=models.PointIdsList(points=checked), wait=True)

    def delete(self, name: str, flt: Filter) -> None:
        """Delete every point matching ``flt``.

        Raises:
            UsageError: ``flt`` has no conditions (it would wipe the collection).
        """
        client_filter = to_client_filter(cv.require_conditions(flt))
        self._read("delete", name, self._client.delete, cv.check_collection_name(name),
                   points_selector=models.FilterSelector(filter=client_filter), wait=True)

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
            with_payload=True, with_vectors=False,
        )
        if result is None:
            return []
        return [ScoredPoint(str(p.id), float(p.score), p.payload or {}) for p in result.points]

    def close(self) -> None:
        """Close the client (local mode: persist and release the folder lock). Idempotent."""
        if self._closed:
            return
        self._closed = True
        with self._guard, _errors("close", "*"):
            self._client.close()

    def __enter__(self) -> "ServerStore":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = self._client.init_options.get("path") or self._client.init_options.get("url")
        return f"ServerStore({where!r})"
