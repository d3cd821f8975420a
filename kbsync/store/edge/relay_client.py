"""Reading an embedded store that a running ingest holds: the client of the relay.

:func:`open_reader` opens the store folder directly when it is free, and
otherwise connects to the relay of the process holding it
(:mod:`kbsync.store.edge.relay`) and returns a :class:`RelayStore`: the read
methods of ``VectorStore`` forwarded over the socket, the write methods
refused with ``StoreUnavailable``.

Bounded waits: connecting takes at most ``CONNECT_TIMEOUT_S``, each call
``call_timeout_s`` (default ``CALL_TIMEOUT_S``); a folder that is locked while
no relay answers (an ingest starting or closing) is retried for ``OPEN_WAIT_S``.

When the ingest ends between two calls, the next call opens the store again
(directly, or through a new ingest's relay) and goes on. When it goes away
after a request was sent, the call fails with a one-line ``StoreUnavailable``.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence, TypeVar

import kbsync.errors as errors
from kbsync.errors import KbsyncError, RelayUntrusted, StoreError, StoreFailure, StoreUnavailable
from kbsync.store import validate as cv
from kbsync.store.edge import relay, relay_socket
from kbsync.store.edge.relay_spares import SpareConnections, peer_closed
from kbsync.models import SparseVec
from kbsync.store.base import Filter, Point, ScoredPoint

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 2.0
CALL_TIMEOUT_S = 30.0
"""Longest wait for one answer: an ingest's engine call (an upsert page) takes well under 1 s."""
OPEN_WAIT_S = 1.0
ABSENT_RELAY_S = 5.0
"""How long a writer waits for the relay of a holder that serves none yet (:func:`take_or_ask`):
``kbsync serve`` opens the folder again, relay included, once the requests in flight finish."""
CONNECTIONS = 8
"""Most connections one :class:`RelayStore` keeps to a relay (of the relay's 32): calls from
several threads (``kbsync serve`` answering many readers during an ingest) go out side by side,
so the relay's threads wait for the writer's GIL and store lock together, not one after another.
Measured with 8 threads of hybrid searches during an ingest (tests/bench/README.md, "The
relay's connections"): 4 against 1, +33-68% searches a second and half the p50; 8 against 4,
+8-37% and half the p95 (p50 up from ~90 to ~140 ms)."""
_POLL_S = 0.05
T = TypeVar("T")


class _RelayAbsent(Exception):
    """Nothing listens on the relay socket (no file, or a stale one)."""


class _NotSent(Exception):
    """The connection was closed before the request went out (safe to resend)."""


def open_reader(store_path: Path, socket_path: Path, *, wait_s: float = OPEN_WAIT_S,
                call_timeout_s: float = CALL_TIMEOUT_S) -> Any:
    """The store for a process that reads: an ``EdgeStore`` when the folder is free,
    else a :class:`RelayStore` through the process holding it.

    Raises:
        StoreUnavailable: the folder stays locked for ``wait_s`` and its holder
            serves no relay, or the relay fails to answer.
        RelayUntrusted: the relay socket's folder or its server is another user's
            (see :mod:`kbsync.store.edge.relay_socket`); nothing was read from it.
    """
    def connect() -> RelayStore:
        return RelayStore.connect(store_path, socket_path, call_timeout_s=call_timeout_s)

    return _acquire(Path(store_path), Path(socket_path), wait_s, connect)


def take_or_ask(store_path: Path, socket_path: Path, *, wait_s: float = ABSENT_RELAY_S) -> Any:
    """For a writer: the ``EdgeStore`` of a free folder or of one its holder handed over
    (:func:`ask_release`); ``None`` when the holder keeps it. A holder serving no relay *yet*
    is waited for within ``wait_s``: ``kbsync serve`` between two stores, as a writer right
    after another meets it (``kbsync.serve.holder``)."""
    from kbsync.store.edge.store import EdgeStore

    deadline = time.monotonic() + wait_s
    while True:
        try:
            return EdgeStore(store_path)
        except StoreUnavailable:
            try:
                return ask_release(store_path, socket_path)
            except _RelayAbsent:
                if time.monotonic() >= deadline:
                    return None
        time.sleep(_POLL_S)


def ask_release(store_path: Path, socket_path: Path, *, wait_s: float = 30.0) -> Any:
    """For a writer that found the folder locked: ask its holder to hand it over (only
    ``kbsync serve`` agrees, see :mod:`kbsync.store.edge.relay`) and return the
    ``EdgeStore`` once it is free, within ``wait_s``; ``None`` when the holder refused or
    kept the store.

    Raises:
        _RelayAbsent: the holder serves no relay (yet).
    """
    from kbsync.store.edge.store import EdgeStore

    try:
        store = RelayStore.connect(store_path, socket_path, call_timeout_s=5.0)
    except KbsyncError as exc:
        log.debug("no holder to ask for %s: %s", store_path, exc)
        return None
    try:
        with store._lock:
            store._exchange("release", {})
    except (_NotSent, KbsyncError) as exc:
        log.debug("the holder of %s keeps it: %s", store_path, exc)
        return None
    finally:
        store.close()
    log.info("the server holding %s (pid %s) hands it over", store_path, store.pid)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return EdgeStore(store_path)
        except StoreUnavailable:
            if time.monotonic() >= deadline:
                return None
        time.sleep(_POLL_S)


def _acquire(store_path: Path, socket_path: Path, wait_s: float,
             connect: Callable[[], T]) -> Any:
    from kbsync.store.edge.store import EdgeStore

    deadline = time.monotonic() + wait_s
    while True:
        try:
            return EdgeStore(store_path)
        except StoreUnavailable as locked:
            try:
                return connect()
            except _RelayAbsent:
                if time.monotonic() >= deadline:
                    raise StoreUnavailable(f"{locked}; its holder serves no reads (no relay on "
                                           f"{socket_path})") from locked
        time.sleep(_POLL_S)


def _error_class(kind: Any) -> type[KbsyncError]:
    cls = getattr(errors, str(kind), None)
    if isinstance(cls, type) and issubclass(cls, KbsyncError):
        return cls
    return StoreError




class RelayStore:
    """A read-only :class:`~kbsync.store.base.VectorStore` served by the ingest holding
    the embedded store.

    Invariants: results equal the ``EdgeStore``'s (same records, same order);
    write methods raise ``StoreUnavailable`` and change nothing. A call goes out on the
    first connection when it is free; while another thread's call holds it, on one of up
    to ``CONNECTIONS - 1`` more, opened when first needed and kept while the relay lasts.
    Every change of where reads go (a new relay, the folder opened directly once the ingest
    ended) is made on the first connection, under its lock; a call on another connection
    that finds the relay closed before its request went out is made again there.
    """

    def __init__(self, store_path: Path, socket_path: Path, *,
                 call_timeout_s: float = CALL_TIMEOUT_S) -> None:
        self.path = Path(store_path)
        self.socket_path = Path(socket_path)
        self.pid: int | None = None
        self._timeout = call_timeout_s
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._direct: Any = None  # the EdgeStore, once the ingest has ended
        self._closed = False
        self._spares = SpareConnections(self._open_spare, lambda: CONNECTIONS - 1)

    @classmethod
    def connect(cls, store_path: Path, socket_path: Path, *,
                call_timeout_s: float = CALL_TIMEOUT_S) -> "RelayStore":
        """Connect to the relay and greet it.

        Raises:
            _RelayAbsent: nothing listens on ``socket_path``.
            RelayUntrusted: the socket's folder or its server is not this user's.
            StoreUnavailable: the relay refused, or did not answer in time.
        """
        store = cls(store_path, socket_path, call_timeout_s=call_timeout_s)
        store._connect()
        return store

    # --- transport --------------------------------------------------------------------------
    def _connect(self) -> None:
        sock, pid = self._open_connection()
        self._sock, self.pid = sock, pid
        log.info("reading %s through the process holding it (pid %s)", self.path, self.pid)

    def _open_connection(self) -> tuple[socket.socket, int]:
        """A new connection to the relay, checked and greeted: (socket, the server's pid)."""
        # Trust before talking: a socket of another user's would answer with its own store.
        if not relay_socket.check_folder(self.socket_path.parent):
            raise _RelayAbsent(f"no folder {self.socket_path.parent}")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(CONNECT_TIMEOUT_S)
        try:
            sock.connect(str(self.socket_path))
            relay_socket.check_peer(sock, self.socket_path)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            sock.close()
            raise _RelayAbsent(str(exc)) from exc
        except OSError as exc:
            sock.close()
            raise StoreUnavailable(f"edge store at {self.path} is held by another process, and "
                                   f"its relay {self.socket_path} cannot be reached: {exc}") from exc
        except RelayUntrusted:
            sock.close()
            raise
        try:
            hello = self._send(sock, "hello", {}, sock.close)
        except _NotSent as exc:
            sock.close()
            raise _RelayAbsent("closed at once") from exc
        return sock, int(hello["pid"])

    def _exchange(self, op: str, args: dict) -> Any:
        """``op`` on the first connection (its lock held by the caller)."""
        assert self._sock is not None
        return self._send(self._sock, op, args, self._drop)

    def _send(self, sock: socket.socket, op: str, args: dict, drop: Callable[[], None]) -> Any:
        """One request on ``sock`` and its result; ``drop`` closes ``sock`` when it failed.

        Raises:
            _NotSent: the connection was closed before the request went out (``sock`` kept).
            StoreUnavailable: no answer in time, or the relay went away after the request.
        """
        sock.settimeout(self._timeout)
        try:
            relay.send_frame(sock, {"v": relay.PROTOCOL_VERSION, "op": op, "args": args})
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise _NotSent() from exc
        except OSError as exc:
            drop()
            raise self._gone(op, exc) from exc
        try:
            reply = relay.recv_frame(sock)
        except TimeoutError as exc:
            drop()
            raise StoreUnavailable(
                f"the process serving reads of {self.path} ({self._who()}) did not answer "
                f"{op} within {self._timeout:g} s; retry later") from exc
        except OSError as exc:
            drop()
            raise self._gone(op, exc) from exc
        except StoreFailure:
            drop()
            raise
        if reply is None:
            drop()
            raise self._gone(op, None)
        return self._result(reply)

    def _result(self, reply: dict) -> Any:
        if reply.get("v") != relay.PROTOCOL_VERSION:
            raise StoreUnavailable(f"the process holding {self.path} speaks relay protocol "
                                   f"{reply.get('v')!r}, this reader {relay.PROTOCOL_VERSION}: "
                                   "use the same kbsync version")
        if reply.get("ok"):
            return reply.get("result")
        error = reply.get("error") or {}
        raise _error_class(error.get("kind"))(str(error.get("message", "relay call failed")))

    def _gone(self, op: str, exc: BaseException | None) -> StoreUnavailable:
        why = f": {exc}" if exc is not None else ""
        during = "while connecting" if op == "hello" else f"during {op}"
        return StoreUnavailable(
            f"the process serving reads of {self.path} ({self._who()}) went away {during}"
            f"{why}; retry (once it has exited the store opens directly)")

    def _who(self) -> str:
        return f"pid {self.pid}" if self.pid is not None else "pid unknown"

    def _drop(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _reacquire(self) -> None:
        """After the relay closed between calls: open directly, or through a new relay."""
        self._drop()

        def reconnect() -> "RelayStore":
            self._connect()
            return self

        opened = _acquire(self.path, self.socket_path, OPEN_WAIT_S, reconnect)
        self._spares.close_idle()  # they led to the relay that closed
        if opened is not self:
            self._direct = opened
            log.info("the process holding %s has ended: reading it directly", self.path)

    def _call(self, op: str, args: dict) -> Any:
        if not self._lock.acquire(blocking=False):  # another thread's call holds the first
            spare = (self._spares.take()
                     if self._reads_relayed() and self._sock is not None else None)
            if spare is not None:
                try:
                    result = self._send(spare, op, args, lambda: self._spares.lose(spare))
                except _NotSent:
                    self._spares.lose(spare)  # the relay closed it: the first one decides
                else:
                    self._spares.keep(spare, usable=self._reads_relayed())
                    return result
            self._lock.acquire()
        try:
            return self._call_first(op, args)
        finally:
            self._lock.release()

    def _call_first(self, op: str, args: dict) -> Any:
        """``op`` on the first connection, its lock held: where reads go is decided here."""
        for _ in range(3):
            if self._closed:
                raise StoreError(f"relay store for {self.path} is closed")
            if self._direct is not None:
                return relay.run_op(self._direct, op, args)
            if self._sock is None or peer_closed(self._sock):
                self._reacquire()
                continue
            try:
                return self._exchange(op, args)
            except _NotSent:
                self._reacquire()
        raise StoreUnavailable(f"the relay of {self.path} keeps closing connections; retry")

    # --- spare connections ----------------------------------------------------------------------
    def _open_spare(self) -> socket.socket | None:
        """A new connection beside the first one, or ``None`` (the call waits for the first)."""
        try:
            return self._open_connection()[0]
        except (_RelayAbsent, KbsyncError, OSError) as exc:
            log.debug("no spare connection to the relay of %s: %s", self.path, exc)
            return None

    def _reads_relayed(self) -> bool:
        """Whether reads still go to a relay (not closed, not the folder itself)."""
        return not self._closed and self._direct is None

    @property
    def connections(self) -> int:
        """Connections open to the relay now: the first one and the spares."""
        return (self._sock is not None) + self._spares.count

    # --- reads --------------------------------------------------------------------------------
    def collection_dimension(self, name: str) -> int | None:
        """The dense dimension of ``name``, or ``None`` when it does not exist."""
        return self._call("collection_dimension", {"name": name})

    def count(self, name: str, flt: Filter | None = None) -> int:
        """Exact number of matching points (0 when the collection is missing)."""
        return int(self._call("count", {"name": name,
                                        "filter": relay.encode_filter(cv.check_filter(flt))}))

    def scroll(
        self, name: str, flt: Filter | None = None, *, with_payload: bool = True,
        with_vectors: bool = False, page_size: int = 1024,
    ) -> Iterator[Point]:
        """Iterate over matching points in id order, one call per page."""
        args = {"name": name, "filter": relay.encode_filter(cv.check_filter(flt)),
                "offset": None, "limit": page_size, "with_payload": with_payload,
                "with_vectors": with_vectors}
        while True:
            page = self._call("scroll_page", args)
            yield from relay.decode_points(page["points"])
            if page["next"] is None:
                return
            args = {**args, "offset": page["next"]}

    def search(
        self, name: str, vector: Sequence[float], *, limit: int,
        flt: Filter | None = None, score_threshold: float | None = None,
    ) -> list[ScoredPoint]:
        """Nearest points by cosine similarity, best first."""
        return relay.decode_scored(self._call("search", {
            "name": name, "vector": vector, "limit": limit,
            "filter": relay.encode_filter(cv.check_filter(flt)),
            "score_threshold": score_threshold}))

    def sparse_search(
        self, name: str, sparse: SparseVec, *, limit: int, flt: Filter | None = None,
    ) -> list[ScoredPoint]:
        """Points by BM25 score, best first."""
        return relay.decode_scored(self._call("sparse_search", {
            "name": name, "sparse": relay.encode_sparse(sparse), "limit": limit,
            "filter": relay.encode_filter(cv.check_filter(flt))}))

    # --- writes: refused ----------------------------------------------------------------------
    def _read_only(self) -> StoreUnavailable:
        return StoreUnavailable(
            f"edge store at {self.path} is read-only here: {self._who()} holds it (a running "
            "ingest or eval) and serves reads only; retry when it has finished")

    def ensure_collection(self, name: str, *, dimension: int, **_options: Any) -> None:
        """Refused: read-only while an ingest runs."""
        raise self._read_only()

    def upsert(self, name: str, points: Sequence[Point]) -> None:
        """Refused: read-only while an ingest runs."""
        raise self._read_only()

    def delete_ids(self, name: str, ids: Sequence[str]) -> None:
        """Refused: read-only while an ingest runs."""
        raise self._read_only()

    def delete(self, name: str, flt: Filter) -> None:
        """Refused: read-only while an ingest runs."""
        raise self._read_only()

    def set_payload(self, name: str, flt: Filter, payload: dict[str, Any]) -> None:
        """Refused: read-only while an ingest runs."""
        raise self._read_only()

    # --- lifecycle ----------------------------------------------------------------------------
    def close(self) -> None:
        """Disconnect (or close the store opened after the ingest ended); idempotent."""
        with self._lock:
            self._closed = True
            self._drop()
            direct, self._direct = self._direct, None
        self._spares.close_idle()
        if direct is not None:
            direct.close()

    def __enter__(self) -> "RelayStore":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RelayStore({str(self.path)!r}, via {str(self.socket_path)!r})"
