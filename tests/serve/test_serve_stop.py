"""Stopping ``kbsync serve`` (issue 40): SIGTERM lets the request in flight finish and exits 0,
the cap per caller refuses a second request meanwhile, ``kill -9`` mid-request gives the client
one line, and a restart replaces the stale socket and serves at once. The request in flight is
an ``ask`` whose chat call the test holds (the fake chat server), so every wait is on an event."""

from __future__ import annotations

import signal
import threading

import pytest

from fake_openai import FakeOpenAIServer
from serving import Server, seed, serve_env

from kbsync.errors import ServerBusy, StoreUnavailable
from kbsync.serve.client import ServerClient


def test_sigterm_drains_kill_9_gives_one_line_and_a_restart_serves_at_once(tmp_path) -> None:
    arrived, release = threading.Event(), threading.Event()

    def reply(_body: dict) -> str:
        arrived.set()
        release.wait(60)
        return "Volcanoes vent steam [1]."

    with FakeOpenAIServer(chat_reply=reply) as chat:
        env = serve_env(tmp_path / "home", KBSYNC_LLM_BASE_URL=chat.url,
                        KBSYNC_LLM_MODEL="fake-chat")
        seed(env)
        sock = tmp_path / "kb.sock"
        args = ("--socket", str(sock), "--max-per-caller", "1")
        with Server(env, *args) as server:
            answers: list = []
            asking = threading.Thread(target=lambda: answers.append(
                ServerClient(unix=sock).ask({"query": "what does the volcano do?"})))
            asking.start()
            assert arrived.wait(60)
            with pytest.raises(ServerBusy, match="1 requests in flight"):  # the cap per caller
                ServerClient(unix=sock).search({"query": "volcano"})
            server.signal(signal.SIGTERM)
            server.wait_for("stopping")
            release.set()
            asking.join(60)
            assert answers and answers[0]["answered"] and answers[0]["citations"]
            assert server.proc.wait(60) == 0 and not sock.exists()

        arrived.clear(), release.clear()
        with Server(env, *args) as server:
            errors: list = []

            def ask() -> None:
                try:
                    ServerClient(unix=sock).ask({"query": "volcano?"})
                except StoreUnavailable as exc:
                    errors.append(exc)
            asking = threading.Thread(target=ask)
            asking.start()
            assert arrived.wait(60)
            server.proc.kill()  # kill -9 mid-request
            server.proc.wait(30)
            asking.join(60)
            release.set()
            assert len(errors) == 1 and "\n" not in str(errors[0])
            assert "closed the connection during ask" in str(errors[0])
        with Server(env, *args):  # the stale socket is replaced: serves at once
            assert ServerClient(unix=sock).search({"query": "volcano", "k": 1})["results"]
