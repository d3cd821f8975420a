"""The client of ``kbsync serve``: what ``kbsync search/ask/stats`` and ``kbsync mcp`` use
when ``KBSYNC_SERVER`` names a server (issue 40).

``KBSYNC_SERVER`` is ``unix:PATH`` (the kernel tells the server who you are) or
``http://HOST:PORT`` (``KBSYNC_TOKEN`` then carries your bearer token). Each method takes
the request's JSON arguments (``query``, ``namespace``, ``k``, ``mode``, ``mqe``, ``hyde``,
``min_score``, ``root``, ``path_prefix``, ``types``, ``modified_since``) and returns the
object ``kbsync search/ask/stats --json`` prints in process. An error reply raises the
:mod:`kbsync.errors` class it names, with its one-line message; a server that cannot be
reached, or goes away mid-answer, raises :class:`~kbsync.errors.StoreUnavailable`.

Both transports keep their connection open between calls (HTTP/1.1 keep-alive: a new TCP
connection and urllib's set-up cost ~1-2 ms a call on 2 cores); a connection the server
closed while idle is reopened and the read sent once more. HTTP goes straight to the URL's
host: no ``HTTP_PROXY`` is consulted (TLS goes through a reverse proxy that *is* the URL).
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import kbsync.errors as errors
from kbsync.errors import KbsyncError, StoreFailure, StoreUnavailable, UsageError
from kbsync.store.edge.relay import recv_frame, send_frame

PROTOCOL_VERSION = 1
CALL_TIMEOUT_S = 60.0
"""Longest wait for one answer (the server gives up sooner: its query budget)."""


def connect_from_env(env: Mapping[str, str] = os.environ) -> "ServerClient | None":
    """The client of the server ``KBSYNC_SERVER`` names, or ``None`` when it is unset.

    Raises:
        UsageError: ``KBSYNC_SERVER`` is neither ``unix:PATH`` nor ``http(s)://HOST:PORT``,
            or HTTP without ``KBSYNC_TOKEN``.
    """
    where = (env.get("KBSYNC_SERVER") or "").strip()
    if not where:
        return None
    if where.startswith("unix:"):
        return ServerClient(unix=Path(where[len("unix:"):]))
    if where.startswith(("http://", "https://")):
        token = (env.get("KBSYNC_TOKEN") or "").strip()
        if not token:
            raise UsageError(f"KBSYNC_SERVER={where} is HTTP: set KBSYNC_TOKEN to your token")
        return ServerClient(url=where.rstrip("/"), token=token)
    raise UsageError(f"KBSYNC_SERVER={where!r}: expected unix:PATH or http://HOST:PORT")


def _raise(error: Any) -> None:
    error = error if isinstance(error, dict) else {}
    cls = getattr(errors, str(error.get("kind")), None)
    if not (isinstance(cls, type) and issubclass(cls, KbsyncError)):
        cls = errors.InternalError
    raise cls(" ".join(str(error.get("message") or "the server failed").split()))


class ServerClient:
    """A connection to one ``kbsync serve`` (see module doc). Thread-safe: calls from
    several threads queue on one connection (make one client per thread for parallel calls)."""

    def __init__(self, *, unix: Path | None = None, url: str | None = None,
                 token: str | None = None, timeout_s: float = CALL_TIMEOUT_S) -> None:
        self.unix, self.url, self._token, self.timeout_s = unix, url, token, timeout_s
        self._sock: socket.socket | None = None
        self._http: http.client.HTTPConnection | None = None  # kept alive between calls
        self._prefix = urllib.parse.urlsplit(str(url)).path.rstrip("/") if url else ""
        self._lock = threading.Lock()

    @property
    def where(self) -> str:
        return f"unix:{self.unix}" if self.unix is not None else str(self.url)

    def search(self, args: dict) -> dict:
        """``kbsync search --json``'s object for ``args``."""
        return self._call("search", args)

    def ask(self, args: dict) -> dict:
        """``kbsync ask --json``'s object for ``args``."""
        return self._call("ask", args)

    def stats(self, args: dict) -> dict:
        """``kbsync stats --json``'s object for ``args`` (``namespace`` only)."""
        return self._call("stats", args)

    def health(self) -> dict:
        """The server's state: ``status``, ``collection``, ``store`` (how it holds it), ..."""
        return self._call("health", {})

    def close(self) -> None:
        with self._lock:
            self._drop()
            self._drop_http()

    def __enter__(self) -> "ServerClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- transports ------------------------------------------------------------------------
    def _call(self, op: str, args: dict) -> dict:
        args = {k: v for k, v in dict(args).items() if v is not None}
        if self.unix is not None:
            with self._lock:
                return self._unix_call(op, args)
        return self._http_call(op, args)  # takes the lock itself

    def _unix_call(self, op: str, args: dict) -> dict:
        for attempt in (1, 2):
            fresh = self._sock is None
            if fresh:
                self._connect()
            sock = self._sock
            assert sock is not None
            try:
                send_frame(sock, {"v": PROTOCOL_VERSION, "op": op, "args": args})
            except (BrokenPipeError, ConnectionResetError) as exc:
                self._drop()  # an idle connection the server closed: once more, afresh
                if fresh or attempt == 2:
                    raise self._gone(op, exc) from exc
                continue
            except OSError as exc:
                self._drop()
                raise self._gone(op, exc) from exc
            try:
                reply = recv_frame(sock)
            except TimeoutError as exc:
                self._drop()
                raise StoreUnavailable(f"kbsync serve at {self.where} did not answer {op} "
                                       f"within {self.timeout_s:g} s") from exc
            except (OSError, StoreFailure) as exc:
                self._drop()
                raise self._gone(op, exc) from exc
            if reply is None:
                self._drop()
                if not fresh and attempt == 1:  # closed while idle (idle timeout): resend
                    continue
                raise self._gone(op, None)
            if reply.get("ok"):
                result: dict = reply.get("result") or {}
                return result
            _raise(reply.get("error"))
        raise self._gone(op, None)

    def _connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout_s)
        try:
            sock.connect(str(self.unix))
        except OSError as exc:
            sock.close()
            raise StoreUnavailable(f"cannot reach kbsync serve at {self.where}: "
                                   f"{exc.strerror or exc}") from exc
        self._sock = sock

    def _drop(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _gone(self, op: str, exc: BaseException | None) -> StoreUnavailable:
        why = f" ({exc})" if exc is not None else ""
        return StoreUnavailable(f"kbsync serve at {self.where} closed the connection during "
                                f"{op}{why}; retry (it may be restarting)")

    def _http_call(self, op: str, args: dict) -> dict:
        body = None if op == "health" else json.dumps(args).encode("utf-8")
        headers = {"Authorization": f"Bearer {self._token}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        with self._lock:
            for attempt in (1, 2):
                fresh = self._http is None
                connection = self._http = self._http or self._open_http()
                try:
                    connection.request("GET" if body is None else "POST",
                                       f"{self._prefix}/v1/{op}", body=body, headers=headers)
                    response = connection.getresponse()
                    status, data = response.status, response.read()
                except (http.client.RemoteDisconnected, ConnectionResetError,
                        BrokenPipeError) as exc:
                    self._drop_http()  # an idle connection the server closed: once more, afresh
                    if fresh or attempt == 2:
                        raise self._unreachable(exc) from exc
                    continue
                except TimeoutError as exc:
                    self._drop_http()
                    raise StoreUnavailable(f"kbsync serve at {self.where} did not answer {op} "
                                           f"within {self.timeout_s:g} s") from exc
                except (OSError, http.client.HTTPException) as exc:
                    self._drop_http()
                    raise self._unreachable(exc) from exc
                if response.will_close:
                    self._drop_http()
                return self._http_answer(status, data)
        raise AssertionError("unreachable")

    def _http_answer(self, status: int, data: bytes) -> dict:
        try:
            answer = json.loads(data)
        except ValueError:
            answer = None
        if 200 <= status < 300 and isinstance(answer, dict):
            return answer
        error = answer.get("error") if isinstance(answer, dict) else None
        if not isinstance(error, dict):
            error = {"kind": "UsageError" if 400 <= status < 500 else "InternalError",
                     "message": f"HTTP {status} from {self.url}"}
        _raise(error)
        raise AssertionError("unreachable")

    def _open_http(self) -> http.client.HTTPConnection:
        parts = urllib.parse.urlsplit(str(self.url))
        kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        try:
            return kind(parts.hostname or "", parts.port, timeout=self.timeout_s)
        except ValueError as exc:  # a port that is not a number
            raise UsageError(f"KBSYNC_SERVER={self.url}: {exc}") from None

    def _drop_http(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None

    def _unreachable(self, exc: BaseException) -> StoreUnavailable:
        return StoreUnavailable(f"cannot reach kbsync serve at {self.url}: "
                                f"{getattr(exc, 'strerror', None) or exc}")
