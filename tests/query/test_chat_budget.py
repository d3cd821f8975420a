"""A search's chat calls (MQE, HyDE) share the query budget (issue 37).

A chat endpoint that accepts connections and never answers held ``search --mqe 3 --hyde``
for 123 s (2 attempts x 30 s, for each expansion). Now the expansions together end within
``KBSYNC_QUERY_TIMEOUT_S``: each request times out with what is left, no retry starts past
it, and the search falls back to the plain query with one note, as the docs promise
(docs/reference/cli.md: "`search` falls back to the plain query and says so in `notes`").
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from kbsync.embed import EmbeddingService, HashEmbedder, clear_service_cache
from kbsync.errors import LLMTransientError
from kbsync.query.llm import ChatClient
from kbsync.ingest.discover import parse_root
from kbsync.ingest.runner import run_plain
from kbsync.query.search import search
from kbsync.runtime import Runtime
from kbsync.settings import Settings
from kbtest import hash_env, run_kbsync, write_tree

from kbsync.store import Point
from kbsync.text.sparse import encode_document

DIM, COLL, K = 64, "chunks", 3

BUDGET_S = 1.0
MARGIN_S = 1.5  # a request cut to the deadline, the store and the fallback search


class SilentServer:
    """Accepts connections on 127.0.0.1, reads nothing and never answers."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._held: list[socket.socket] = []
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}/v1"

    @property
    def accepted(self) -> int:
        return len(self._held)

    def _accept(self) -> None:
        self._listener.settimeout(0.05)
        while not self._closing.is_set():
            try:
                conn, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            self._held.append(conn)

    def close(self) -> None:
        self._closing.set()
        self._thread.join(5)
        for conn in [*self._held, self._listener]:
            conn.close()


@pytest.fixture
def kb(edge):
    """20 one-chunk documents in namespace ``default``."""
    service = EmbeddingService(HashEmbedder(DIM), cache=None)
    edge.ensure_collection(COLL, dimension=DIM, keyword_indexes=("namespace",), sparse=True)
    texts = [f"invoices are emailed on business day {i}" for i in range(20)]
    vectors = service.embed_passages(texts).vectors
    edge.upsert(COLL, [
        Point(str(uuid.uuid5(uuid.NAMESPACE_URL, t)), {"namespace": "default", "doc_id": f"d{i}",
              "text": t, "chunk_index": 0, "embedding_failed": False}, v, encode_document(t))
        for i, (t, v) in enumerate(zip(texts, vectors))])
    return edge


@pytest.fixture
def silent() -> Iterator[SilentServer]:
    server = SilentServer()
    try:
        yield server
    finally:
        server.close()


def test_expansions_on_a_silent_chat_endpoint_end_within_the_query_budget(kb, silent) -> None:
    service = EmbeddingService(HashEmbedder(DIM), cache=None, query_budget_s=BUDGET_S)
    llm = ChatClient("fake-chat", base_url=silent.url, timeout_s=30.0, max_attempts=2)

    began = time.monotonic()
    result = search("when do bills arrive", store=kb, service=service, collection=COLL, k=K,
                    mode="dense", mqe=3, hyde=True, llm=llm)
    took = time.monotonic() - began

    assert took < BUDGET_S + MARGIN_S, took
    assert result.expansions == [] and len(result.results) == K  # the plain query's hits
    assert len(result.notes) == 1, result.notes
    note = result.notes[0]
    assert note.startswith("mqe and hyde skipped: the chat model failed (LLMTransientError: "
                           f"chat endpoint {silent.url}/chat/completions")
    assert f"within {BUDGET_S:g} s" in note and "KBSYNC_QUERY_TIMEOUT_S" in note
    assert silent.accepted == 1  # no retry and no HyDE call past the budget


def test_a_budget_spent_before_a_call_sends_nothing(silent) -> None:
    llm = ChatClient("fake-chat", base_url=silent.url, timeout_s=30.0, max_attempts=2)

    with llm.within(time.monotonic() - 0.1, 5.0), pytest.raises(LLMTransientError,
                                                                 match="within 5 s"):
        llm.complete("s", "u")

    assert silent.accepted == 0


def test_outside_a_search_the_chat_timeout_is_its_own(silent) -> None:
    # ``ask``'s answer and evaluation modes keep KBSYNC_LLM_TIMEOUT_S per request.
    llm = ChatClient("fake-chat", base_url=silent.url, timeout_s=0.3, max_attempts=1)

    began = time.monotonic()
    with pytest.raises(LLMTransientError, match="timed out"):
        llm.complete("s", "u")

    assert 0.3 <= time.monotonic() - began < 0.3 + MARGIN_S


@pytest.mark.slow
def test_cli_search_with_a_silent_chat_endpoint_ends_within_the_budget(tmp_path: Path, monkeypatch,
                                                                       silent) -> None:
    home, share = tmp_path / "home", tmp_path / "share"
    write_tree(share, {"keys.md": "# Keys\n\nRotate signing keys every ninety days.\n"})
    env = hash_env(None, home, KBSYNC_LLM_MODEL="fake-chat", KBSYNC_LLM_BASE_URL=silent.url,
                   KBSYNC_QUERY_TIMEOUT_S="2")
    for key in [k for k in os.environ if k.upper().startswith("KBSYNC_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        if key.startswith("KBSYNC_"):
            monkeypatch.setenv(key, value)
    runtime = Runtime.open(Settings())  # the store, filled in this process (no Prefect)
    try:
        assert run_plain([parse_root(str(share))], runtime=runtime).added == 1
    finally:
        runtime.close()
        clear_service_cache()

    began = time.monotonic()
    code, result, stderr = run_kbsync(env, "search", "--json", "--mqe", "3", "--hyde",
                                      "signing keys")
    took = time.monotonic() - began

    assert code == 0, stderr
    assert result["results"] and result["expansions"] == []
    assert [n.split(":")[0] for n in result["notes"]] == ["mqe and hyde skipped"]
    assert stderr.count("skipped") == 1, stderr  # one line
    assert took < 2 + 20, took  # the budget, plus the interpreter's and the store's start
