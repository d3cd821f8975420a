"""The Unix socket door of ``kbsync serve`` (issue 40).

Who: the kernel names the caller (``SO_PEERCRED``, :func:`kbsync.store.edge.relay_socket.peer_uid`)
when it connects; that uid, with its groups from NSS at each request
(:meth:`~kbsync.perms.reader.Reader.of_uid`), is the reader. Nothing a caller sends can
name another. Who may connect at all is the socket file's mode and group
(``--socket-mode``, default 0660, and ``--socket-group``): docs/serving.md.

Wire: the relay's frames (:func:`kbsync.store.edge.relay.send_frame` / ``recv_frame``: a
4-byte big-endian length, then UTF-8 JSON), at most
:data:`~kbsync.serve.handler.MAX_REQUEST_BYTES` per request. A request is
``{"v": 1, "op": OP, "args": {...}}``; the reply ``{"v": 1, "ok": true, "result": ...}`` or
``{"v": 1, "ok": false, "error": {"kind": KIND, "message": LINE}}``. A malformed request is
answered and the connection goes on; an oversized one is answered and closed (its body is
never read).

Each connection has a thread of its own with an idle timeout, so a client that connects
and never sends (or stops reading) holds up nobody else; at most ``max_connections`` are
open. :meth:`UnixServer.stop` (SIGTERM) stops accepting, removes the socket and lets the
requests in flight finish.
"""

from __future__ import annotations

import grp
import logging
import os
import socket
import stat
import threading
import time
from pathlib import Path


from kbsync.errors import KbsyncError, ServerBusy, StoreError, StoreFailure, UsageError
from kbsync.perms.reader import Reader
from kbsync.serve.access_log import log_request
from kbsync.serve.handler import MAX_REQUEST_BYTES, Handler
from kbsync.store.edge.relay import recv_frame, send_frame
from kbsync.store.edge.relay_socket import peer_uid

log = logging.getLogger(__name__)

PROTOCOL_VERSION = 1
IDLE_TIMEOUT_S = 30.0
"""A connection that sends nothing for this long is closed (the client reconnects)."""
MAX_CONNECTIONS = 256


def error_reply(exc: KbsyncError) -> dict:
    """The reply carrying ``exc`` (its class name and one line)."""
    message = " ".join(str(exc).split()) if str(exc) else ""
    return {"v": PROTOCOL_VERSION, "ok": False, "error": {"kind": exc.kind, "message": message}}


class UnixServer:
    """Serves a :class:`Handler` on a Unix socket (module doc)."""

    def __init__(self, handler: Handler, path: Path, *, mode: int = 0o660,
                 group: str | None = None, idle_timeout_s: float = IDLE_TIMEOUT_S,
                 log_queries: bool = False, max_connections: int = MAX_CONNECTIONS) -> None:
        self.handler, self.path = handler, Path(path)
        self.mode, self.group = mode, group
        self.idle_timeout_s, self.log_queries = idle_timeout_s, log_queries
        self.max_connections = max_connections
        self._listener: socket.socket | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._conns: dict[socket.socket, threading.Thread] = {}
        self._busy: set[socket.socket] = set()  # connections with a request in flight
        self._idle = threading.Condition(self._lock)
        self._accepter: threading.Thread | None = None

    def start(self) -> None:
        """Bind (replacing a stale socket, never a live one or another file) and accept.

        Raises:
            UsageError: the path is taken, or the group does not exist.
            StoreError: the socket cannot be set up.
        """
        gid = None
        if self.group is not None:
            try:
                gid = grp.getgrnam(self.group).gr_gid
            except KeyError:
                raise UsageError(f"--socket-group {self.group!r}: no such group") from None
        _remove_stale(self.path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # no window where others could connect before the chmod
        try:
            listener.bind(str(self.path))
            if gid is not None:
                os.chown(self.path, -1, gid)
            os.chmod(self.path, self.mode)
            listener.listen(128)
        except OSError as exc:
            listener.close()
            raise StoreError(f"cannot listen on {self.path}: {exc}") from exc
        finally:
            os.umask(old)
        self._listener = listener
        self._inode = os.stat(self.path).st_ino
        self._accepter = threading.Thread(target=self._accept_loop, name="kbsync-serve-accept",
                                          daemon=True)
        self._accepter.start()
        log.info("serving on unix:%s (mode %o%s)", self.path, self.mode,
                 f", group {self.group}" if self.group else "")

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stopping.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # stop() closed the listener
            with self._lock:
                if self._stopping.is_set() or len(self._conns) >= self.max_connections:
                    busy = ServerBusy(f"kbsync serve has {len(self._conns)} connections "
                                      "open (its most) or is stopping; retry shortly")
                    threading.Thread(target=_refuse, args=(conn, busy), daemon=True).start()
                    continue
                worker = threading.Thread(target=self._serve, args=(conn,),
                                          name="kbsync-serve-conn", daemon=True)
                self._conns[conn] = worker
            worker.start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            uid = peer_uid(conn)
            if uid is None:  # pragma: no cover - Linux always tells
                send_frame(conn, error_reply(UsageError("the kernel did not name the caller")))
                return
            conn.settimeout(self.idle_timeout_s)
            while not self._stopping.is_set():
                try:
                    request = recv_frame(conn, MAX_REQUEST_BYTES)
                except StoreFailure as exc:  # oversized or malformed: answer, then go on or close
                    fatal = "over the" in str(exc)
                    text = str(exc).replace("relay message", "request")
                    send_frame(conn, error_reply(UsageError(text)))
                    log_request(caller=f"uid {uid}", route="?", latency_ms=0.0, error=text,
                                counts={}, query=None)
                    if fatal:
                        return
                    continue
                if request is None:
                    return
                with self._lock:
                    self._busy.add(conn)
                try:
                    self._answer(conn, uid, request)
                finally:
                    with self._lock:
                        self._busy.discard(conn)
                        self._idle.notify_all()
        except (OSError, StoreFailure) as exc:  # the client went away, or idled out
            log.debug("connection closed: %s", exc)
        finally:
            with self._lock:
                self._conns.pop(conn, None)
                self._idle.notify_all()
            conn.close()

    def _answer(self, conn: socket.socket, uid: int, request: dict) -> None:
        started = time.perf_counter()
        reader = Reader.of_uid(uid)  # groups as NSS gives them now
        op, args = request.get("op"), request.get("args")
        if request.get("v") != PROTOCOL_VERSION:
            refusal = UsageError(f"this server speaks protocol {PROTOCOL_VERSION}, the request "
                                 f"{request.get('v')!r}: use the same kbsync version")
            outcome_error: KbsyncError | None = refusal
            reply, counts = error_reply(refusal), {}
        else:
            outcome = self.handler.handle(op, args, reader)
            outcome_error, counts = outcome.error, outcome.counts
            reply = (error_reply(outcome.error) if outcome.error is not None
                     else {"v": PROTOCOL_VERSION, "ok": True, "result": outcome.result})
        query = args.get("query") if self.log_queries and isinstance(args, dict) else None
        log_request(caller=f"{reader.name} (uid {uid})", route=f"unix:{op}",
                    latency_ms=(time.perf_counter() - started) * 1000,
                    error=None if outcome_error is None else outcome_error.kind,
                    counts=counts, query=query)
        send_frame(conn, reply)  # OSError: the client went away mid-answer; the caller logs it

    def stop(self, grace_s: float = 30.0) -> None:
        """Stop accepting, remove the socket, let requests in flight finish (idempotent)."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
            self._unlink()
        deadline = time.monotonic() + grace_s
        with self._lock:
            for conn in list(self._conns):
                if conn not in self._busy:  # idle ones: wake their read at once
                    _shutdown(conn)
            while self._busy and time.monotonic() < deadline:
                self._idle.wait(deadline - time.monotonic())
            for conn in list(self._conns):
                _shutdown(conn)

    def _unlink(self) -> None:
        try:
            if os.stat(self.path).st_ino == self._inode:
                os.unlink(self.path)
        except OSError:
            pass


def _refuse(conn: socket.socket, error: KbsyncError) -> None:
    try:
        conn.settimeout(1.0)
        recv_frame(conn, MAX_REQUEST_BYTES)
        send_frame(conn, error_reply(error))
    except (OSError, StoreFailure):
        pass
    finally:
        conn.close()


def _shutdown(conn: socket.socket) -> None:
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _remove_stale(path: Path) -> None:
    """Remove a socket nothing listens on (a killed server's); refuse a live one or a file."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise UsageError(f"{path} exists and is not a socket; remove it or choose another path")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(str(path))
    except OSError:
        path.unlink(missing_ok=True)
        log.info("removed a stale socket %s (its server is gone)", path)
        return
    finally:
        probe.close()
    raise UsageError(f"another server already listens on {path}")
