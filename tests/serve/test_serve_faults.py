"""``kbsync serve`` when what it stands on fails (issue 40, "Bad input and faults"): a store
that is missing, a store another process holds without serving reads, and an embedding
endpoint that fails (a folder deleted under a running server is not tested: the engine
keeps serving what it holds open). Each request gets one line naming the cause, and the server keeps
serving: the next request, once the cause is gone, is answered. Real server subprocess, the
fake OpenAI server (tests/fake_openai.py) for the model; waits are on events."""

from __future__ import annotations

import pytest

from serving import Server, call, seed, serve_env

from fake_openai import Fault, FakeOpenAIServer

pytestmark = pytest.mark.slow  # three server subprocesses and a fake model: ~40 s loaded


def _error(reply: dict | None) -> str:
    assert reply is not None and reply["ok"] is False, reply
    message = reply["error"]["message"]
    assert "\n" not in message and "Traceback" not in message, message
    return f"{reply['error']['kind']}: {message}"


def _first_hit(reply: dict | None) -> str:
    assert reply is not None and reply["ok"] is True, reply
    return reply["result"]["results"][0]["doc_id"]


def test_a_missing_store_then_a_held_one_are_one_line_each(tmp_path) -> None:
    from kbsync.settings import Settings
    from kbsync.store.edge.store import EdgeStore

    home, sock = tmp_path / "home", tmp_path / "kb.sock"
    env = serve_env(home)
    query = {"query": "volcano", "k": 1}
    with Server(env, "--socket", str(sock)):
        # Nothing indexed yet: one line naming the namespaces this reader can read (none).
        line = _error(call(sock, "search", query))
        assert "namespaces you can read: none" in line, line
    seed(env)  # the owner indexes (the Python API's writes do not ask a server for the store)
    # Another process holds the store and serves no reads (here: this test's own handle):
    # one line, and once it lets go the next request is served.
    held = EdgeStore(Settings(home=home).store_path)
    with Server(env, "--socket", str(sock)) as server:
        try:
            line = _error(call(sock, "search", query))
        finally:
            held.close()
        assert line.startswith("StoreUnavailable: "), line
        assert _first_hit(call(sock, "search", query)) == "notes/volcano"

        assert call(sock, "health", {})["result"]["status"] == "ok"
        assert server.proc is not None and server.proc.poll() is None, server.seen()


def test_a_failing_embedding_endpoint_is_one_line_and_the_server_goes_on(tmp_path) -> None:
    home, sock = tmp_path / "home", tmp_path / "kb.sock"
    with FakeOpenAIServer(dimension=8) as model:
        env = serve_env(home, KBSYNC_EMBED_PROVIDER="openai", KBSYNC_EMBED_BASE_URL=model.url,
                        KBSYNC_EMBED_MODEL="fake-embedding", KBSYNC_EMBED_DIMENSIONS="8",
                        KBSYNC_EMBED_API_KEY="k", KBSYNC_QUERY_TIMEOUT_S="5")
        seed(env)
        query = {"query": "glacier melt", "k": 1}
        with Server(env, "--socket", str(sock)) as server:
            assert _first_hit(call(sock, "search", query)) == "notes/glacier"
            # a query not embedded before (the query cache would answer that one)
            model.set_faults(lambda request: Fault.error(500) if request.inputs else None)
            line = _error(call(sock, "search", {"query": "harbour cranes", "k": 1}))
            assert "500" in line or "embedding" in line.lower(), line
            model.set_faults(None)
            assert _first_hit(call(sock, "search", {"query": "volcano ash", "k": 1})) == \
                "notes/volcano"
            assert server.proc is not None and server.proc.poll() is None, server.seen()
