"""The HTTP door of ``kbsync serve`` (issue 40): FastAPI on uvicorn, for remote readers and agents.

Routes: ``POST /v1/search``, ``POST /v1/ask``, ``POST /v1/stats`` (a JSON object of the
request's arguments, :data:`~kbsync.serve.handler.OPS`), ``GET /v1/health``; the OpenAPI
schema at ``/openapi.json`` (``/docs`` renders it). Answers are the objects
``kbsync search/ask/stats --json`` print; errors ``{"error": {"kind", "message"}}`` with a 4xx
or 5xx status (:data:`STATUS`).

Who: ``Authorization: Bearer TOKEN``. The token file (``--tokens``) holds lines
``USER sha256:HEX`` (``kbsync serve --hash-token`` prints the second field); only the hash is
stored. A missing or unknown token is 401; there is no anonymous reader. The file must be the
server's own and unreadable by group and other, or the server refuses to start. The reader
is the token's user with its groups from NSS at each request.

Limits: a body over :data:`~kbsync.serve.handler.MAX_REQUEST_BYTES` is 413, read no further;
malformed JSON 400. TLS is a reverse proxy's job (docs/serving.md).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import stat
import threading
import time
from pathlib import Path
from typing import Any

from kbsync.errors import KbsyncError, UsageError
from kbsync.perms.reader import Reader
from kbsync.serve.access_log import log_request
from kbsync.serve.handler import MAX_REQUEST_BYTES, OPS, Handler

log = logging.getLogger(__name__)

STATUS = {"UsageError": 400, "PermissionsNotCaptured": 400, "LLMNotConfigured": 400,
          "EmbedderMismatch": 400, "ServerBusy": 429, "QueryTimeout": 504,
          "StoreUnavailable": 503, "LockHeld": 503}
"""HTTP status of an error kind; any other kind is 500."""


def load_tokens(path: str | Path) -> dict[str, str]:
    """``{sha256 hex: user}`` from the token file (module doc).

    Raises:
        UsageError: the file is missing, another user's, readable by group or other, or
            has a malformed line.
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise UsageError(f"--tokens {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, encoding="utf-8") as handle:
        info = os.fstat(handle.fileno())
        if info.st_uid != os.geteuid():
            raise UsageError(f"--tokens {path} belongs to uid {info.st_uid}, not to this server's "
                             f"user (uid {os.geteuid()})")
        if stat.S_IMODE(info.st_mode) & 0o077:
            raise UsageError(f"--tokens {path} is open to group or other (mode "
                             f"{stat.S_IMODE(info.st_mode):04o}): chmod 600 it, then start again")
        text = handle.read()
    tokens: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2 or not parts[1].startswith("sha256:") or len(parts[1]) != 71:
            raise UsageError(f"--tokens {path}:{number}: expected 'USER sha256:HEX' "
                             "(kbsync serve --hash-token prints the second field)")
        tokens[parts[1][len("sha256:"):].lower()] = parts[0]
    if not tokens:
        raise UsageError(f"--tokens {path} holds no token")
    return tokens


def _json(data: Any) -> Any:
    """An answer encoded once, as the socket door encodes it (``relay.send_frame``). Returning
    the dict made FastAPI walk it with ``jsonable_encoder`` first: ~0.8 ms of the HTTP door's
    time for 5 hits, against ~0.07 ms for this (tests/bench/README.md, serve_bench.py)."""
    from starlette.responses import Response

    from kbsync.store.edge.relay import _json_default

    body = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"),
                      default=_json_default).encode("utf-8")
    return Response(body, media_type="application/json")


def _error(kind: str, message: str, status: int | None = None):
    from fastapi.responses import JSONResponse

    return JSONResponse({"error": {"kind": kind, "message": message}},
                        status_code=status or STATUS.get(kind, 500),
                        headers={"WWW-Authenticate": "Bearer"} if status == 401 else None)


def build_app(handler: Handler, tokens: dict[str, str], *, log_queries: bool = False) -> Any:
    """The FastAPI application (module doc)."""
    from fastapi import FastAPI, Request
    from starlette.concurrency import run_in_threadpool

    app = FastAPI(title="kbsync serve", version="1",
                  description="Search one shared knowledge base, as the user your token names: "
                              "every answer goes through kbsync's permission filter.")

    def who(request: Request) -> str | None:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        digest = hashlib.sha256(token.strip().encode("utf-8")).hexdigest()
        for known, user in tokens.items():
            if hmac.compare_digest(known, digest):
                return user
        return None

    async def body_of(request: Request) -> Any:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > MAX_REQUEST_BYTES:
            raise _TooLarge()
        data = bytearray()
        async for chunk in request.stream():
            data += chunk
            if len(data) > MAX_REQUEST_BYTES:
                raise _TooLarge()
        if not data.strip():
            return {}
        return json.loads(data)

    async def answer(op: str, request: Request):
        started = time.perf_counter()
        user = who(request)
        caller = user or "-"
        if user is None:
            log_request(caller="anonymous", route=f"http:{op}", latency_ms=0.0,
                        error="401", counts={}, query=None)
            return _error("UsageError", "missing or unknown bearer token "
                                        "(Authorization: Bearer TOKEN)", 401)
        try:
            reader = Reader.of_name(user)
            args = {} if op == "health" else await body_of(request)
        except _TooLarge:
            return _logged(caller, op, started, _error(
                "UsageError", f"request body over {MAX_REQUEST_BYTES} bytes", 413))
        except ValueError as exc:
            return _logged(caller, op, started, _error(
                "UsageError", f"malformed JSON: {exc}", 400))
        except KbsyncError as exc:  # the token's user is gone from NSS
            return _logged(caller, op, started, _error(
                exc.kind, f"the token's user: {' '.join(str(exc).split())}", 403))
        outcome = await run_in_threadpool(handler.handle, op, args, reader)
        query = args.get("query") if log_queries and isinstance(args, dict) else None
        log_request(caller=f"{reader.name} (uid {reader.uid})", route=f"http:{op}",
                    latency_ms=(time.perf_counter() - started) * 1000,
                    error=None if outcome.error is None else outcome.error.kind,
                    counts=outcome.counts, query=query)
        if outcome.error is not None:
            return _error(outcome.error.kind, " ".join(str(outcome.error).split()))
        return _json(outcome.result)

    for op in ("search", "ask", "stats"):
        app.add_api_route(f"/v1/{op}", _route(answer, op), methods=["POST"],
                          summary=f"kbsync {op} --json, as the token's user",
                          openapi_extra={"requestBody": {"required": op != "stats", "content": {
                              "application/json": {"schema": _schema(op)}}}})
    app.add_api_route("/v1/health", _route(answer, "health"), methods=["GET"],
                      summary="the server's state")
    return app


class _TooLarge(Exception):
    pass


def _route(answer, op: str):
    from fastapi import Request

    async def route(request):
        return await answer(op, request)
    route.__name__ = op
    route.__annotations__ = {"request": Request}  # a class, not a string: FastAPI injects it
    return route


def _logged(caller: str, op: str, started: float, response: Any) -> Any:
    log_request(caller=caller, route=f"http:{op}",
                latency_ms=(time.perf_counter() - started) * 1000,
                error=str(response.status_code), counts={}, query=None)
    return response


_JSON_TYPES = {"query": "string", "namespace": "string", "k": "integer", "mode": "string",
               "mqe": "integer", "hyde": "boolean", "min_score": "number", "root": "string",
               "path_prefix": "string", "types": "array", "modified_since": "string"}


def _schema(op: str) -> dict:
    props: dict[str, dict] = {}
    for key in OPS[op]:
        kind = _JSON_TYPES[key]
        props[key] = {"type": kind, **({"items": {"type": "string"}} if kind == "array" else {})}
    if "k" in props:
        props["k"].update(minimum=1, maximum=100)
    if "mode" in props:
        props["mode"]["enum"] = ["dense", "hybrid"]
    return {"type": "object", "properties": props, "additionalProperties": False,
            **({"required": ["query"]} if "query" in props else {})}


class HttpServer:
    """uvicorn on a thread of its own; :meth:`stop` lets requests in flight finish."""

    def __init__(self, handler: Handler, address: str, tokens: dict[str, str], *,
                 log_queries: bool = False) -> None:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise UsageError(f"--http {address!r}: expected HOST:PORT, e.g. 127.0.0.1:8765")
        self.host, self.port = host.strip("[]"), int(port)
        self.app = build_app(handler, tokens, log_queries=log_queries)
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._failed: BaseException | None = None

    def start(self) -> None:
        """Listen, or raise :class:`UsageError` naming why not (the port is taken)."""
        import uvicorn

        config = uvicorn.Config(self.app, host=self.host, port=self.port, log_config=None,
                                access_log=False, timeout_graceful_shutdown=30,
                                lifespan="off")
        self._server = uvicorn.Server(config)

        def run() -> None:
            try:
                self._server.run()
            except BaseException as exc:  # noqa: BLE001 - uvicorn exits on a bind failure
                self._failed = exc
        self._thread = threading.Thread(target=run, name="kbsync-serve-http", daemon=True)
        self._thread.start()
        while not self._server.started:
            if not self._thread.is_alive():
                raise UsageError(f"cannot serve HTTP on {self.host}:{self.port} (the address is "
                                 "taken or not this machine's)")
            time.sleep(0.02)
        log.info("serving on http://%s:%d", self.host, self.port)

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(35)
