"""The HTTP transport of :class:`kbsync.serve.client.ServerClient`: one kept-alive connection,
reopened when the server closed it while idle, against a real HTTP/1.1 server on a socket."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kbsync.errors import LockHeld, StoreUnavailable
from kbsync.serve.client import ServerClient


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive unless a side closes

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append((self.path, self.headers["Authorization"], body))
        if body.get("query") == "locked":
            self._answer(503, {"error": {"kind": "LockHeld", "message": "held\nby pid 7"}})
        else:
            self._answer(200, {"results": [], "query": body.get("query")})

    def do_GET(self) -> None:  # noqa: N802
        self.server.requests.append((self.path, self.headers["Authorization"], None))
        self._answer(200, {"status": "ok"})

    def _answer(self, status: int, data: dict) -> None:
        payload = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list = []
        self.connections: list[socket.socket] = []

    def get_request(self):
        conn, address = super().get_request()
        self.connections.append(conn)
        return conn, address


@pytest.fixture()
def server():
    httpd = _Server()
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _client(httpd: _Server) -> ServerClient:
    return ServerClient(url=f"http://127.0.0.1:{httpd.server_address[1]}/", token="tok-1",
                        timeout_s=10)


def test_calls_share_one_kept_alive_connection(server) -> None:
    with _client(server) as client:
        assert client.search({"query": "a", "k": 3, "mode": None}) == {"results": [], "query": "a"}
        assert client.health() == {"status": "ok"}
        assert client.stats({"namespace": "default"})["results"] == []
    assert len(server.connections) == 1
    assert [(path, auth) for path, auth, _ in server.requests] == [
        ("/v1/search", "Bearer tok-1"), ("/v1/health", "Bearer tok-1"),
        ("/v1/stats", "Bearer tok-1")]
    assert server.requests[0][2] == {"query": "a", "k": 3}  # None arguments are not sent


def test_a_connection_the_server_closed_while_idle_is_reopened_once(server) -> None:
    with _client(server) as client:
        client.search({"query": "first"})
        # The server's idle timeout: it shuts the kept connection between two calls.
        server.connections[0].shutdown(socket.SHUT_RDWR)
        assert client.search({"query": "second"})["query"] == "second"
    assert len(server.connections) == 2
    assert [body["query"] for _, _, body in server.requests] == ["first", "second"]


def test_an_error_reply_raises_its_kind_with_one_line(server) -> None:
    with _client(server) as client, pytest.raises(LockHeld, match="^held by pid 7$"):
        client.search({"query": "locked"})


def test_a_server_that_is_gone_is_store_unavailable(server) -> None:
    port = server.server_address[1]
    server.shutdown()
    server.server_close()
    with ServerClient(url=f"http://127.0.0.1:{port}", token="t", timeout_s=5) as client, \
            pytest.raises(StoreUnavailable, match=f"cannot reach kbsync serve at http://127.0.0.1:{port}"):
        client.health()
