"""``kbsync serve`` through its real doors (issue 40): the socket and HTTP answer what the
CLI answers in process, bad input gets one line and the server goes on, a silent or
vanishing client holds up nobody, SIGTERM drains, ``kill -9`` gives the client one line and
a restart serves at once (tests/serve/test_serve_stop.py). Every wait is on the event itself
(a log line, a request arriving)."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request

import pytest

from serving import Server, call, clean, connect, kbsync, recv, seed, send_raw, serve_env

from kbsync.errors import UsageError
from kbsync.serve.client import ServerClient, connect_from_env


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    base = tmp_path_factory.mktemp("serve")
    env = serve_env(base / "home")
    seed(env)
    sock = base / "kb.sock"
    with Server(env, "--socket", str(sock), "--idle-timeout", "120") as server:
        yield env, sock, server


def test_the_socket_answers_what_the_cli_answers_in_process(served) -> None:
    env, sock, _ = served
    remote = {**env, "KBSYNC_SERVER": f"unix:{sock}"}
    for args in (("search", "volcano steam", "--json"),
                 ("search", "glacier", "-k", "2", "--mode", "dense", "--json"),
                 ("stats", "--json")):
        here, there = kbsync(env, *args), kbsync(remote, *args)
        assert here.returncode == there.returncode == 0, (here.stderr, there.stderr)
        assert clean(json.loads(there.stdout)) == clean(json.loads(here.stdout))
    text = kbsync(remote, "search", "volcano")
    assert text.returncode == 0 and "notes/volcano" in text.stdout
    refused = kbsync(remote, "search", "volcano", "--as-user", "root")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "--as-user is not available through KBSYNC_SERVER" in refused.stderr


def test_bad_requests_get_one_line_and_the_server_keeps_serving(served) -> None:
    _, sock, _ = served
    cases = [({"query": "volcano", "k": 100000}, "k must be between 1 and 100"),
             ({"query": "volcano", "namespace": "nope"}, "namespaces you can read: default"),
             ({"query": "volcano", "as_user": "root"}, "answers as the connected user"),
             ({"query": "volcano", "path_prefix": "../../etc"}, ""),
             ({"query": "volcano", "types": "pdf' OR 1=1"}, ""),
             ({"query": "volcano", "k": "5"}, "wrong type"),
             ({"k": 5}, "'query'")]
    for args, text in cases:
        reply = call(sock, "search", args)
        assert reply is not None and reply["ok"] is False, args
        assert reply["error"]["kind"] == "UsageError" and text in reply["error"]["message"]
        assert "\n" not in reply["error"]["message"]
    assert call(sock, "drop_all", {})["error"]["kind"] == "UsageError"
    with connect(sock) as conn:  # malformed JSON: answered, and the connection goes on
        send_raw(conn, b"{not json")
        assert recv(conn)["error"]["message"].startswith("malformed request")
        send_raw(conn, json.dumps({"v": 1, "op": "health", "args": {}}).encode())
        assert recv(conn)["result"]["status"] == "ok"
    with connect(sock) as conn:  # 10 MB announced: refused unread, then closed
        conn.sendall((10 * 2**20).to_bytes(4, "big"))
        reply = recv(conn)
        assert "over the 1048576-byte limit" in reply["error"]["message"]
        assert recv(conn) is None
    assert call(sock, "search", {"query": "volcano", "k": 1})["result"]["results"][0][
        "doc_id"] == "notes/volcano"


def test_a_silent_client_and_a_vanishing_one_hold_up_nobody(served) -> None:
    _, sock, server = served
    with connect(sock):  # connects and never sends
        with connect(sock) as gone:  # asks, and leaves before the answer
            send_raw(gone, json.dumps({"v": 1, "op": "search",
                                       "args": {"query": "harbour"}}).encode())
        with ServerClient(unix=sock) as client:
            assert client.search({"query": "harbour", "k": 1})["results"][0]["doc_id"] \
                == "notes/harbour"
    server.wait_for("route=unix:search")  # the access log has a line per request
    assert server.proc.poll() is None


def test_client_raises_the_kind_the_server_names(served) -> None:
    _, sock, _ = served
    client = connect_from_env({"KBSYNC_SERVER": f"unix:{sock}"})
    with pytest.raises(UsageError, match="namespaces you can read: default"):
        client.search({"query": "volcano", "namespace": "elsewhere"})
    assert client.health()["status"] == "ok"
    assert connect_from_env({}) is None
    with pytest.raises(UsageError, match="KBSYNC_TOKEN"):
        connect_from_env({"KBSYNC_SERVER": "http://127.0.0.1:1"})


def _post(url: str, body: bytes, token: str | None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_http_needs_a_token_from_an_owner_only_file_and_refuses_bad_input(served,
                                                                           tmp_path) -> None:
    env, sock, _ = served
    token = "t0k3n-for-root"
    line = kbsync(env, "serve", "--hash-token", timeout=60)  # stdin is empty: refused
    assert line.returncode == 2
    hashed = __import__("kbsync.app.cli_serve", fromlist=["hash_token"]).hash_token(token)
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# user sha256\nroot {hashed}\n")
    os.chmod(tokens, 0o640)
    port = _free_port()
    http = ("--http", f"127.0.0.1:{port}", "--tokens", str(tokens))
    refused = kbsync(env, "serve", *http)
    assert refused.returncode == 2 and "chmod 600" in refused.stderr
    assert refused.stderr.count("\n") == 1
    os.chmod(tokens, 0o600)
    with Server(env, *http):
        url = f"http://127.0.0.1:{port}/v1"
        query = json.dumps({"query": "volcano steam"}).encode()
        assert _post(f"{url}/search", query, None)[0] == 401
        assert _post(f"{url}/search", query, "wrong")[0] == 401
        status, data = _post(f"{url}/search", query, token)
        assert status == 200
        assert clean(data) == clean(call(sock, "search", {"query": "volcano steam"})["result"])
        assert _post(f"{url}/search", b"{not json", token)[0] == 400
        assert _huge(port, token) == 413
        status, data = _post(f"{url}/search", json.dumps({"query": "v", "k": 100000}).encode(),
                             token)
        assert status == 400 and data["error"]["kind"] == "UsageError"
        status, data = _post(f"{url}/search", json.dumps({"query": "v", "as_user": "x"}).encode(),
                             token)
        assert status == 400
        client = connect_from_env({"KBSYNC_SERVER": f"http://127.0.0.1:{port}",
                                   "KBSYNC_TOKEN": token})
        assert clean(client.stats({})) == clean(call(sock, "stats", {})["result"])
        with pytest.raises(UsageError, match="namespaces you can read"):
            client.search({"query": "v", "namespace": "nope"})
        schema = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/openapi.json",
                                                   timeout=30).read())
        assert {"/v1/search", "/v1/ask", "/v1/stats", "/v1/health"} <= set(schema["paths"])


def _huge(port: int, token: str) -> int:
    """POST a 10 MB body: the answer comes after its headers, before the body is read."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.putrequest("POST", "/v1/search")
    conn.putheader("Authorization", f"Bearer {token}")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(10 * 2**20))
    conn.endheaders()
    try:
        conn.send(b"x" * 2**16)  # the server may close before it has all of it
    except OSError:
        pass
    response = conn.getresponse()
    assert json.loads(response.read())["error"]["kind"] == "UsageError"
    conn.close()
    return response.status


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
