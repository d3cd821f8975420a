"""A fake OpenAI-compatible server for tests: real HTTP on 127.0.0.1, scriptable faults.

It speaks the wire format of ``POST /v1/embeddings`` (float and base64
encodings, ``dimensions``), ``POST /v1/chat/completions`` (plain and
``stream: true``) and ``GET /v1/models``, so the real ``openai`` client talks to
it over a socket. Vectors come from :class:`kbsync.embed.hash.HashEmbedder`, so
they are deterministic and similar texts get similar vectors.

Usage::

    with FakeOpenAIServer(dimension=8, faults=[Fault.error(503), None]) as server:
        client = OpenAI(base_url=server.url, api_key="k")   # server.url ends in /v1
        ...
        assert len(server.requests) == 2

``faults`` is a list (the i-th request, counted over all endpoints, gets
``faults[i]``; ``None`` or past the end = answer normally) or a callable
``(RecordedRequest) -> Fault | None``. It can be replaced at any time with
:meth:`FakeOpenAIServer.set_faults`.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from array import array
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Sequence

from kbsync.embed.hash import HashEmbedder


@dataclass
class Fault:
    """What to do instead of (or to) a normal answer. Build with the class methods."""

    status: int | None = None
    message: str = "injected fault"
    error_type: str = "server_error"
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    raw_body: bytes | None = None
    content_type: str = "application/json"
    drop_vectors: int = 0
    dimension: int | None = None
    shuffle: bool = False
    nan: bool = False
    disconnect: bool = False

    @classmethod
    def error(cls, status: int, message: str = "injected fault", *, retry_after: float | str | None = None,
              error_type: str = "server_error") -> "Fault":
        """Answer ``status`` with an OpenAI-style error body (and Retry-After if given)."""
        headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
        return cls(status=status, message=message, headers=headers, error_type=error_type)

    @classmethod
    def rate_limited(cls, retry_after: float | str | None = None) -> "Fault":
        """429 Too Many Requests."""
        return cls.error(429, "Rate limit reached", retry_after=retry_after, error_type="rate_limit_error")

    @classmethod
    def stall(cls, seconds: float) -> "Fault":
        """Answer normally, but only after ``seconds`` (longer than the client timeout)."""
        return cls(delay_s=seconds)

    @classmethod
    def malformed(cls, body: bytes = b'{"object": "list", "data": [{"index": 0, "embed') -> "Fault":
        """200 with a body that is not valid JSON."""
        return cls(status=200, raw_body=body)

    @classmethod
    def too_few(cls, missing: int = 1) -> "Fault":
        """200 with ``missing`` fewer vectors than inputs."""
        return cls(drop_vectors=missing)

    @classmethod
    def wrong_dimension(cls, dimension: int) -> "Fault":
        """200 with vectors of another length."""
        return cls(dimension=dimension)

    @classmethod
    def shuffled(cls) -> "Fault":
        """200 with ``data`` in reverse order (``index`` still correct)."""
        return cls(shuffle=True)

    @classmethod
    def non_finite(cls) -> "Fault":
        """200 with a NaN in the first vector."""
        return cls(nan=True)

    @classmethod
    def drop_connection(cls) -> "Fault":
        """Close the socket without answering."""
        return cls(disconnect=True)


@dataclass
class RecordedRequest:
    """One request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    received_at: float
    status: int | None = None  # what was answered (None: nothing, e.g. dropped)

    @property
    def inputs(self) -> list[str]:
        """The ``input`` of an embeddings request as a list (empty otherwise)."""
        value = self.body.get("input") if isinstance(self.body, dict) else None
        if isinstance(value, str):
            return [value]
        return list(value) if isinstance(value, list) else []


FaultPlan = Sequence["Fault | None"] | Callable[[RecordedRequest], "Fault | None"] | None


class FakeOpenAIServer:
    """OpenAI-compatible test server (see module doc).

    Args:
        dimension: default vector length (a request's ``dimensions`` overrides it).
        faults: the fault plan.
        max_batch: answer ``batch_status`` when an embeddings request has more inputs.
        batch_status: 413 (default) or 400 with a DashScope-style message.
        require_key: answer 401 unless ``Authorization: Bearer <require_key>``; the
            401 message echoes the key received, as some servers do.
        chat_reply: reply text, or ``(request body) -> text``, for chat completions.
        model: model name reported by ``/v1/models``.
    """

    def __init__(
        self,
        *,
        dimension: int = 8,
        faults: FaultPlan = None,
        max_batch: int | None = None,
        batch_status: int = 413,
        require_key: str | None = None,
        chat_reply: str | Callable[[dict], str] = "fake reply",
        model: str = "fake-embedding",
    ) -> None:
        self.dimension = dimension
        self.max_batch = max_batch
        self.batch_status = batch_status
        self.require_key = require_key
        self.chat_reply = chat_reply
        self.model = model
        self.requests: list[RecordedRequest] = []
        self._faults: FaultPlan = faults
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._embedders: dict[int, HashEmbedder] = {}
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> "FakeOpenAIServer":
        """Bind 127.0.0.1 on a free port and serve in a daemon thread."""
        handler = _make_handler(self)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        # A short poll interval makes stop() (shutdown waits for one poll) fast.
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                        name="fake-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; stalled answers are abandoned."""
        self._closing.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "FakeOpenAIServer":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        """Base URL for ``OpenAI(base_url=...)``, ending in ``/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    # -- scripting and inspection ---------------------------------------------------------
    def set_faults(self, faults: FaultPlan) -> None:
        """Replace the fault plan; list indexes count from the next request."""
        with self._lock:
            self._faults = faults
            self._offset = len(self.requests)

    def embedding_requests(self) -> list[RecordedRequest]:
        """Recorded ``/embeddings`` requests."""
        with self._lock:
            return [r for r in self.requests if r.path.endswith("/embeddings")]

    def chat_requests(self) -> list[RecordedRequest]:
        """Recorded ``/chat/completions`` requests."""
        with self._lock:
            return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def reset(self) -> None:
        """Forget recorded requests (the fault plan index restarts too)."""
        with self._lock:
            self.requests.clear()
            self._offset = 0

    def vectors_for(self, texts: Sequence[str], dimension: int | None = None) -> list[list[float]]:
        """The vectors this server answers for ``texts`` (for assertions)."""
        return self._embedder(dimension or self.dimension).embed_batch(list(texts))

    # -- internals --------------------------------------------------------------------
    _offset = 0

    def _record(self, request: RecordedRequest) -> Fault | None:
        with self._lock:
            index = len(self.requests) - self._offset
            self.requests.append(request)
            plan = self._faults
        if plan is None:
            return None
        if callable(plan):
            return plan(request)
        return plan[index] if 0 <= index < len(plan) else None

    def _embedder(self, dimension: int) -> HashEmbedder:
        with self._lock:
            if dimension not in self._embedders:
                self._embedders[dimension] = HashEmbedder(dimension)
            return self._embedders[dimension]

    def _wait(self, seconds: float) -> bool:
        """Sleep unless the server is closing; True when the wait ran to its end."""
        return not self._closing.wait(seconds)


def _error_body(message: str, error_type: str, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}


def _make_handler(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 30  # an idle keep-alive connection does not pin a thread forever

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            pass

        def do_GET(self) -> None:  # noqa: N802 - stdlib name
            record = RecordedRequest("GET", self.path, self._headers(), None, time.time())
            if self._pre(record):
                return
            if self.path.rstrip("/").endswith("/models"):
                self._json(record, 200, {"object": "list", "data": [
                    {"id": server.model, "object": "model", "created": 0, "owned_by": "fake"}]})
            else:
                self._json(record, 404, _error_body(f"no route {self.path}", "invalid_request_error"))

        def do_POST(self) -> None:  # noqa: N802 - stdlib name
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body: Any = json.loads(raw) if raw else None
            except ValueError:
                body = None
            record = RecordedRequest("POST", self.path, self._headers(), body, time.time())
            if self._pre(record):
                return
            if not isinstance(body, dict):
                self._json(record, 400, _error_body("body must be a JSON object", "invalid_request_error"))
            elif self.path.rstrip("/").endswith("/embeddings"):
                self._embeddings(record, body, self._fault)
            elif self.path.rstrip("/").endswith("/chat/completions"):
                self._chat(record, body)
            else:
                self._json(record, 404, _error_body(f"no route {self.path}", "invalid_request_error"))

        # Faults that replace the answer; returns True when the request is handled.
        def _pre(self, record: RecordedRequest) -> bool:
            fault = server._record(record)
            self._fault = fault
            if fault is None:
                if server.require_key is not None:
                    return self._check_key(record)
                return False
            if fault.delay_s and not server._wait(fault.delay_s):
                self.close_connection = True
                return True
            if fault.disconnect:
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                return True
            if fault.raw_body is not None:
                self._send(record, fault.status or 200, fault.raw_body, fault.content_type, fault.headers)
                return True
            if fault.status is not None and fault.status >= 300:
                self._json(record, fault.status, _error_body(fault.message, fault.error_type), fault.headers)
                return True
            if server.require_key is not None:
                return self._check_key(record)
            return False

        def _check_key(self, record: RecordedRequest) -> bool:
            auth = record.headers.get("authorization", "")
            given = auth[len("Bearer "):] if auth.startswith("Bearer ") else auth
            if given == server.require_key:
                return False
            self._json(record, 401, _error_body(
                f"Incorrect API key provided: {given}. You can find your API key in your account.",
                "invalid_request_error", "invalid_api_key"))
            return True

        def _embeddings(self, record: RecordedRequest, body: dict, fault: Fault | None) -> None:
            texts = record.inputs
            if not texts or any(not isinstance(t, str) or t == "" for t in texts):
                self._json(record, 400, _error_body("'$.input' is invalid: empty or non-string input",
                                                    "invalid_request_error"))
                return
            if server.max_batch is not None and len(texts) > server.max_batch:
                message = f"batch size is invalid, it should not be larger than {server.max_batch}."
                self._json(record, server.batch_status, _error_body(message, "invalid_request_error"))
                return
            dimension = int(body.get("dimensions") or server.dimension)
            if fault is not None and fault.dimension is not None:
                dimension = fault.dimension
            vectors = server._embedder(dimension).embed_batch(texts)
            if fault is not None and fault.nan:
                vectors[0][0] = float("nan")
            base64_format = body.get("encoding_format") == "base64"
            data = []
            for index, vector in enumerate(vectors):
                value: Any = vector
                if base64_format:
                    value = base64.b64encode(array("f", vector).tobytes()).decode("ascii")
                data.append({"object": "embedding", "index": index, "embedding": value})
            if fault is not None and fault.drop_vectors:
                data = data[: max(0, len(data) - fault.drop_vectors)]
            if fault is not None and fault.shuffle:
                data.reverse()
            tokens = sum(len(t.split()) for t in texts)
            payload = {"object": "list", "data": data, "model": body.get("model", server.model),
                       "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
            # json.dumps writes NaN as the bare token NaN, as some buggy servers do.
            self._json(record, 200, payload)

        def _chat(self, record: RecordedRequest, body: dict) -> None:
            reply = server.chat_reply(body) if callable(server.chat_reply) else server.chat_reply
            model = body.get("model", server.model)
            created = int(time.time())
            if body.get("stream"):
                chunks = [
                    {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": created, "model": model,
                     "choices": [{"index": 0, "delta": {"role": "assistant", "content": reply},
                                  "finish_reason": None}]},
                    {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": created, "model": model,
                     "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                ]
                stream = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
                self._send(record, 200, stream.encode(), "text/event-stream", {})
                return
            payload = {
                "id": "chatcmpl-fake", "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": reply},
                             "finish_reason": "stop", "logprobs": None}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
            self._json(record, 200, payload)

        def _headers(self) -> dict[str, str]:
            return {k.lower(): v for k, v in self.headers.items()}

        def _json(self, record: RecordedRequest, status: int, payload: Any,
                  headers: dict[str, str] | None = None) -> None:
            self._send(record, status, json.dumps(payload).encode(), "application/json", headers or {})

        def _send(self, record: RecordedRequest, status: int, body: bytes, content_type: str,
                  headers: dict[str, str]) -> None:
            record.status = status
            try:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the client gave up (timeout); nothing to do

    return Handler
