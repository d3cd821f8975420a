"""The read relay: a process holding the embedded store serves other processes' reads.

The embedded engine admits one process per store folder (its WAL lock refuses
a second ``EdgeShard.load``, and qdrant-edge-py 0.9.0 has no read-only open),
so while an ingest runs, ``search``, ``stats``, ``ask`` and ``eval`` could not
open the store. The ingest therefore listens on a Unix domain socket (see
:mod:`kbsync.store.edge.relay_socket`: where, and the folder and peer checks that keep
another user's socket out; folder 0700, socket 0600, removed on close, a stale
one from a crashed run replaced) and answers read-only store calls there. Readers
embed their queries themselves: the ingest only runs store queries, under the
same per-shard locks as its own writes (``EdgeStore`` serialises every engine
call), so reads see each document's old or new version, never a mix within
one engine call.

Protocol, version :data:`PROTOCOL_VERSION`: each message is a 4-byte
big-endian length and that many bytes of UTF-8 JSON (at most
:data:`MAX_FRAME`). A request is ``{"v": 1, "op": OP, "args": {...}}``; the
reply ``{"v": 1, "ok": true, "result": ...}`` or ``{"v": 1, "ok": false,
"error": {"kind": KIND, "message": ...}}`` where ``KIND`` names a class of
``kbsync.errors``. The first request on a connection is ``hello`` (answers the
server's pid). ``OPS`` lists the other operations: the reads of
``VectorStore`` (scroll goes page by page). ``release`` asks the holder to give the
store up (a writer wants it): only a holder that set :attr:`RelayServer.on_release`
(``kbsync serve``, :mod:`kbsync.serve.holder`) agrees; it answers at once and closes the
store soon after, and an ingest holding it refuses.

The client side is :mod:`kbsync.store.edge.relay_client`.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import stat
import struct
import threading
import time
from pathlib import Path
from typing import Any, Callable

from kbsync.errors import KbsyncError, StoreError, StoreFailure, StoreUnavailable
from kbsync.models import SparseVec
from kbsync.store.base import Condition, Filter, Match, Point, Range, ScoredPoint
from kbsync.store.edge.relay_socket import (SOCKET_NAME, prepare_folder, socket_mode,  # noqa: F401
                                           socket_path)

log = logging.getLogger(__name__)

PROTOCOL_VERSION = 1
MAX_FRAME = 64 * 2**20
"""Largest message (bytes): bounds a reader's memory; a 1024-point page with vectors is ~10 MB."""
_MAX_CLIENTS = 32  # one thread each; more connections are refused with StoreUnavailable
_IDLE_TIMEOUT_S = 600.0  # a connection idle this long is dropped (the reader reconnects)
_STOP_GRACE_S = 2.0  # how long close() lets calls in flight finish
_HEADER = struct.Struct(">I")


# --- frames --------------------------------------------------------------------------------
def _json_default(value: Any) -> Any:
    # numpy arrays and scalars (embedder output) convert exactly; anything else is a bug.
    for attr in ("tolist", "item"):
        if hasattr(value, attr):
            return getattr(value, attr)()
    raise TypeError(f"cannot send {type(value).__name__} over the relay")


def send_frame(sock: socket.socket, message: dict) -> None:
    """Send one message.

    Raises:
        StoreError: it encodes to more than ``MAX_FRAME`` bytes.
        OSError: the connection failed.
    """
    data = json.dumps(message, separators=(",", ":"), default=_json_default).encode("utf-8")
    if len(data) > MAX_FRAME:
        raise StoreError(f"relay message of {len(data)} bytes is over the {MAX_FRAME}-byte limit "
                         "(ask for smaller pages)")
    sock.sendall(_HEADER.pack(len(data)) + data)


def recv_frame(sock: socket.socket, max_size: int = MAX_FRAME) -> dict | None:
    """Receive one message of at most ``max_size`` bytes; ``None`` when the peer closed
    before sending one.

    Raises:
        StoreError: a malformed or oversized message.
        ConnectionError: the peer closed in the middle of a message.
        OSError: including ``TimeoutError`` from the socket's timeout.
    """
    header = _recv_exact(sock, _HEADER.size, eof_ok=True)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > max_size:
        raise StoreError(f"relay message of {size} bytes is over the {max_size}-byte limit")
    body = _recv_exact(sock, size, eof_ok=False)
    assert body is not None  # without eof_ok, EOF raises
    try:
        message = json.loads(body)
    except ValueError as exc:
        raise StoreError(f"malformed relay message: {exc}") from exc
    if not isinstance(message, dict):
        raise StoreError("malformed relay message: not a JSON object")
    return message


def _recv_exact(sock: socket.socket, size: int, *, eof_ok: bool) -> bytes | None:
    buf = bytearray(size)
    view, got = memoryview(buf), 0
    while got < size:
        n = sock.recv_into(view[got:])
        if n == 0:
            if got == 0 and eof_ok:
                return None
            raise ConnectionError("relay peer closed the connection mid-message")
        got += n
    return bytes(buf)


# --- records on the wire -------------------------------------------------------------------
def encode_filter(flt: Filter | None) -> dict | None:
    """Our filter as JSON."""
    if flt is None:
        return None
    return {"must": [_encode_match(m) for m in flt.must],
            "must_not": [_encode_match(m) for m in flt.must_not]}


def _encode_match(match: Condition) -> list | dict:
    if isinstance(match, Range):  # a dict, so a Match's three-item list stays as it was
        return {"range": [match.key, match.gte, match.lte]}
    return [match.key, match.value, None if match.any_of is None else list(match.any_of)]


def decode_filter(data: Any) -> Filter | None:
    """The inverse of :func:`encode_filter` (the store validates the conditions)."""
    if data is None:
        return None
    return Filter(must=tuple(_decode_match(m) for m in data["must"]),
                  must_not=tuple(_decode_match(m) for m in data["must_not"]))


def _decode_match(data: Any) -> Condition:
    if isinstance(data, dict):
        key, gte, lte = data["range"]
        return Range(key, gte, lte)
    key, value, any_of = data
    return Match(key, value, None if any_of is None else tuple(any_of))


def encode_sparse(sparse: SparseVec) -> dict:
    """A sparse vector as JSON."""
    return {"indices": sparse.indices, "values": sparse.values}


def decode_sparse(data: Any) -> SparseVec:
    """The inverse of :func:`encode_sparse`."""
    return SparseVec(indices=list(data["indices"]), values=list(data["values"]))


def decode_scored(rows: Any) -> list[ScoredPoint]:
    """Hits as sent by the search operations."""
    return [ScoredPoint(str(i), float(score), payload) for i, score, payload in rows]


def decode_points(rows: Any) -> list[Point]:
    """Points as sent by ``scroll_page``."""
    return [Point(id=str(i), payload=payload, vector=vector) for i, payload, vector in rows]


def _scored(hits: list[ScoredPoint]) -> list[list]:
    return [[h.id, h.score, h.payload] for h in hits]


# --- operations ----------------------------------------------------------------------------
def _search(store: Any, a: dict) -> Any:
    return _scored(store.search(a["name"], a["vector"], limit=a["limit"],
                                flt=decode_filter(a["filter"]),
                                score_threshold=a["score_threshold"]))


def _sparse_search(store: Any, a: dict) -> Any:
    return _scored(store.sparse_search(a["name"], decode_sparse(a["sparse"]), limit=a["limit"],
                                       flt=decode_filter(a["filter"])))


def _scroll_page(store: Any, a: dict) -> Any:
    points, following = store.scroll_page(
        a["name"], decode_filter(a["filter"]), offset=a["offset"], limit=a["limit"],
        with_payload=a["with_payload"], with_vectors=a["with_vectors"])
    return {"points": [[p.id, p.payload, p.vector] for p in points], "next": following}


OPS: dict[str, Callable[[Any, dict], Any]] = {
    "collection_dimension": lambda store, a: store.collection_dimension(a["name"]),
    "count": lambda store, a: store.count(a["name"], decode_filter(a["filter"])),
    "search": _search,
    "sparse_search": _sparse_search,
    "scroll_page": _scroll_page,
}
"""The read operations served: ``OPS[op](edge_store, args)`` returns the JSON result."""


def run_op(store: Any, op: object, args: Any) -> Any:
    """Run one operation on ``store`` (an ``EdgeStore``) and return its JSON result.

    Raises:
        KbsyncError: what the store raised.
        StoreError: an unknown operation or malformed arguments.
    """
    handler = OPS.get(op) if isinstance(op, str) else None  # a JSON list is unhashable
    if handler is None:
        raise StoreError(f"the relay has no operation {op!r} (reader and ingest run different "
                         "kbsync versions?)")
    try:
        return handler(store, args)
    except KbsyncError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        log.debug("bad relay request %s", op, exc_info=True)
        raise StoreError(f"malformed relay request {op!r}: {type(exc).__name__}: {exc}") from exc


def error_reply(exc: KbsyncError) -> dict:
    """The reply carrying ``exc`` (its class name and one-line message)."""
    return {"v": PROTOCOL_VERSION, "ok": False,
            "error": {"kind": exc.kind, "message": str(exc).splitlines()[0] if str(exc) else ""}}


# --- the server ----------------------------------------------------------------------------
class RelayServer:
    """Serves :data:`OPS` on a Unix socket for one ``EdgeStore`` (see module doc).

    Invariants: at most one server per store (the store's folder lock is held),
    so a socket file found at start is stale and replaced; every connection is
    served by its own daemon thread; :meth:`stop` removes the socket file and
    lets calls in flight finish for up to ``_STOP_GRACE_S``.
    """

    def __init__(self, store: Any, path: Path, listener: socket.socket) -> None:
        self.store, self.path = store, path
        self._listener = listener
        self._inode = os.stat(path).st_ino
        self._stopping = threading.Event()
        self._lock = threading.Lock()  # guards _conns
        self._conns: dict[socket.socket, threading.Thread] = {}
        self._accepter = threading.Thread(target=self._accept_loop, name="kbsync-relay",
                                          daemon=True)
        self.on_release: Callable[[], None] | None = None
        """Called (on a thread of its own) when a writer asks for the store; ``None``:
        this holder does not hand it over (an ingest)."""

    @classmethod
    def start(cls, store: Any, path: Path) -> "RelayServer":
        """Listen on ``path`` (replacing a stale socket) and start serving.

        Raises:
            StoreError: the folder or socket cannot be set up.
        """
        prepare_folder(path.parent)  # refuses a folder another user made or can enter
        _remove_stale(path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(str(path))
            # The folder is 0700 (2770 the group's) already: no window for other users.
            os.chmod(path, socket_mode(path.parent))
            listener.listen(_MAX_CLIENTS)
            server = cls(store, path, listener)
        except OSError as exc:
            listener.close()
            raise StoreError(f"cannot listen on the relay socket {path}: {exc}") from exc
        server._accepter.start()
        log.info("serving reads of %s on %s", getattr(store, "path", store), path)
        return server

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:  # stop() shut the listener down
                return
            with self._lock:
                if self._stopping.is_set() or len(self._conns) >= _MAX_CLIENTS:
                    self._refuse(conn)
                    continue
                worker = threading.Thread(target=self._serve, args=(conn,),
                                          name="kbsync-relay-conn", daemon=True)
                self._conns[conn] = worker
            worker.start()

    def _refuse(self, conn: socket.socket) -> None:
        busy = StoreUnavailable(f"the ingest serving reads of {self.store.path} has "
                                f"{_MAX_CLIENTS} readers connected; retry shortly")
        try:
            conn.settimeout(1.0)
            recv_frame(conn)
            send_frame(conn, error_reply(busy))
        except (OSError, StoreFailure):
            pass  # the reader sees the connection closed and reports it
        finally:
            conn.close()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(_IDLE_TIMEOUT_S)
            while True:
                request = recv_frame(conn)
                if request is None:
                    return
                try:
                    send_frame(conn, self.answer(request))
                except StoreFailure as exc:  # the reply is too large: say so instead
                    send_frame(conn, error_reply(exc))
        except (OSError, StoreFailure) as exc:  # the reader went away or spoke garbage
            log.debug("relay connection closed: %s", exc)
        finally:
            with self._lock:
                self._conns.pop(conn, None)
            conn.close()

    def answer(self, request: dict) -> dict:
        """The reply to one request (never raises for a bad request)."""
        if request.get("v") != PROTOCOL_VERSION:
            return error_reply(StoreUnavailable(
                f"the running ingest speaks relay protocol {PROTOCOL_VERSION}, this reader "
                f"{request.get('v')!r}: use the same kbsync version, or wait for the ingest"))
        op = request.get("op")
        if op == "hello":
            return {"v": PROTOCOL_VERSION, "ok": True,
                    "result": {"pid": os.getpid(), "store": str(self.store.path)}}
        if op == "release":
            if self.on_release is None:
                return error_reply(StoreUnavailable(
                    f"the process holding {self.store.path} (pid {os.getpid()}) does not hand "
                    "the store over"))
            threading.Thread(target=self.on_release, name="kbsync-release", daemon=True).start()
            return {"v": PROTOCOL_VERSION, "ok": True, "result": {"pid": os.getpid()}}
        try:
            result = run_op(self.store, op, request.get("args") or {})
        except KbsyncError as exc:
            return error_reply(exc)
        return {"v": PROTOCOL_VERSION, "ok": True, "result": result}

    def stop(self) -> None:
        """Stop accepting, remove the socket, let calls in flight finish, close (idempotent)."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept() at once
        except OSError:
            pass  # already not connected: close() below is enough
        self._listener.close()
        self._unlink()
        with self._lock:
            conns = dict(self._conns)
        for conn in conns:  # readers get EOF once their current call is answered
            _shutdown(conn, socket.SHUT_RD)
        deadline = time.monotonic() + _STOP_GRACE_S
        for worker in conns.values():
            worker.join(max(deadline - time.monotonic(), 0.0))
        for conn in conns:
            _shutdown(conn, socket.SHUT_RDWR)
        self._accepter.join(_STOP_GRACE_S)

    def _unlink(self) -> None:
        try:
            if os.stat(self.path).st_ino == self._inode:  # never remove another server's socket
                os.unlink(self.path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("could not remove the relay socket %s: %s", self.path, exc)


def _shutdown(conn: socket.socket, how: int) -> None:
    try:
        conn.shutdown(how)
    except OSError:
        pass  # the reader closed it first


def _remove_stale(path: Path) -> None:
    """Remove a socket left by a crashed run (the caller holds the store, so it is stale)."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreError(f"cannot inspect the relay socket {path}: {exc}") from exc
    if not stat.S_ISSOCK(info.st_mode):
        raise StoreError(f"{path} exists and is not a socket; remove it")
    try:
        path.unlink()
    except OSError as exc:
        raise StoreError(f"cannot remove the stale relay socket {path}: {exc}") from exc
    log.info("removed a stale relay socket %s (left by a run that crashed)", path)
