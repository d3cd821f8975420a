"""A search against an embedding endpoint that never answers ends within its budget,
with one line naming the endpoint (issue 22).

Before, ``kbsync search`` waited ``KBSYNC_EMBED_TIMEOUT_S`` x ``KBSYNC_EMBED_MAX_ATTEMPTS``
(60 s x 5 = 308 s with the backoff) and printed nothing meanwhile. A query now has its own
budget, ``KBSYNC_QUERY_TIMEOUT_S`` (10 s by default), all attempts together.

The store is built through the fake OpenAI server while it answers; then it is made to
hang (it accepts the request and never replies) and the real CLI searches.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kbsync.runtime import Runtime
from kbsync.embed import clear_service_cache
from kbsync.ingest.discover import parse_root
from kbsync.ingest.runner import run_plain
from kbsync.settings import Settings
from tests.fake_openai import Fault, FakeOpenAIServer

KBSYNC = str(Path(sys.executable).with_name("kbsync"))
BUDGET_S = 2.0
SLACK_S = 3.0  # the last request's timeout and the process's exit, on a busy machine


@pytest.fixture
def indexed(tmp_path, monkeypatch):
    """(env for the CLI, the fake server): one document indexed through the server."""
    share = tmp_path / "share"
    share.mkdir()
    (share / "guide.md").write_text("# Keys\n\nRotate the signing keys every quarter.\n")
    with FakeOpenAIServer(dimension=8) as server:
        env = {k: v for k, v in os.environ.items() if not k.upper().startswith("KBSYNC_")}
        env.update(KBSYNC_HOME=str(tmp_path / "home"), KBSYNC_CONVERT_ISOLATION="false",
                   KBSYNC_EMBED_PROVIDER="openai", KBSYNC_EMBED_BASE_URL=server.url,
                   KBSYNC_EMBED_API_KEY="sk-secretsecretsecret", KBSYNC_EMBED_MODEL="fake-embedding",
                   KBSYNC_EMBED_DIMENSIONS="8")
        for key in [k for k in os.environ if k.upper().startswith("KBSYNC_")]:
            monkeypatch.delenv(key)
        for key, value in env.items():
            if key.startswith("KBSYNC_"):
                monkeypatch.setenv(key, value)
        runtime = Runtime.open(Settings())
        try:
            assert run_plain([parse_root(str(share))], runtime=runtime).added == 1
        finally:
            runtime.close()
            clear_service_cache()
        yield env, server


def _search(env: dict, query: str, *extra: str, timeout: float = 90) -> tuple[subprocess.CompletedProcess, float]:
    began = time.monotonic()
    done = subprocess.run([KBSYNC, "search", query, "--mode", "dense", *extra], env=env,
                          capture_output=True, text=True, timeout=timeout)
    return done, time.monotonic() - began


def test_a_hanging_endpoint_ends_the_search_within_its_budget(indexed):
    env, server = indexed
    server.set_faults(lambda request: Fault.stall(600) if request.inputs else None)
    server.reset()
    env = {**env, "KBSYNC_QUERY_TIMEOUT_S": str(BUDGET_S)}

    done, took = _search(env, "how often are keys rotated", "--json")

    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert f"127.0.0.1:{server.port}" in lines[0] and f"within {BUDGET_S:g} s" in lines[0]
    assert "KBSYNC_QUERY_TIMEOUT_S" in lines[0] and "sk-secret" not in done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["kind"] == "EmbeddingTransientError" and error["message"] in lines[0]
    # From the first query request to the end of the process: the budget, plus slack.
    first = server.embedding_requests()[0].received_at  # time.time(), as the server records
    assert time.time() - first <= BUDGET_S + SLACK_S, took
    print(f"search ended {took:.1f} s after it started (budget {BUDGET_S:g} s)")


def test_the_budget_leaves_a_slow_but_answering_endpoint_alone(indexed):
    env, server = indexed
    server.set_faults(lambda request: Fault.stall(0.5) if request.inputs else None)
    done, _ = _search({**env, "KBSYNC_QUERY_TIMEOUT_S": str(BUDGET_S)}, "signing keys", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["results"][0]["path"].endswith("guide.md")


def test_the_dimension_probe_of_a_query_shares_the_budget():
    """Without KBSYNC_EMBED_DIMENSIONS the first query probes the endpoint: under the
    same budget, not 5 x the request timeout."""
    from kbsync.embed import EmbeddingService
    from kbsync.embed.openai_provider import OpenAIEmbedder
    from kbsync.errors import EmbeddingTransientError

    with FakeOpenAIServer(dimension=8, faults=lambda request: Fault.stall(600)) as server:
        embedder = OpenAIEmbedder("fake-embedding", base_url=server.url, api_key="k",
                                  timeout_s=60.0)
        service = EmbeddingService(embedder, cache=None, query_budget_s=1.0)
        began = time.monotonic()
        with pytest.raises(EmbeddingTransientError, match=r"did not answer the query within 1 s"):
            service.embed_query("anything")
        assert time.monotonic() - began < 1.0 + SLACK_S


def test_a_search_without_configured_dimensions_probes_within_the_budget(indexed):
    """The query side's identity check reads the dimension: without
    KBSYNC_EMBED_DIMENSIONS that is a probe of the endpoint, which once ran a batch's
    retries (5 x 60 s, 306 s measured) before the budgeted query could start."""
    env, server = indexed
    server.set_faults(lambda request: Fault.stall(600))
    server.reset()
    env = {k: v for k, v in env.items() if k != "KBSYNC_EMBED_DIMENSIONS"}
    env["KBSYNC_QUERY_TIMEOUT_S"] = str(BUDGET_S)

    done, took = _search(env, "how often are keys rotated")

    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert f"127.0.0.1:{server.port}" in lines[0] and "KBSYNC_QUERY_TIMEOUT_S" in lines[0]
    first = server.embedding_requests()[0].received_at
    assert time.time() - first <= BUDGET_S + SLACK_S, took


def test_a_hyde_passage_the_endpoint_never_embeds_costs_the_budget(edge, chat):
    """HyDE's passage was embedded as a batch is (5 attempts x 60 s); it now shares the
    query's budget, and a passage that cannot be embedded is one note, not a failure."""
    import uuid

    from kbsync.embed import EmbeddingService
    from kbsync.embed.openai_provider import OpenAIEmbedder
    from kbsync.query.llm import ChatClient
    from kbsync.query.search import search
    from kbsync.store import Point

    reply = "Bills are emailed on the first business day of each month."
    chat.chat_reply = reply
    embedder = OpenAIEmbedder("fake-embedding", base_url=chat.url, api_key="k", dimensions=8,
                              timeout_s=60.0)
    service = EmbeddingService(embedder, cache=None, query_budget_s=1.0)
    texts = [f"invoices are emailed on business day {i}" for i in range(6)]
    edge.ensure_collection("chunks", dimension=8, keyword_indexes=("namespace",))
    edge.upsert("chunks", [
        Point(str(uuid.uuid5(uuid.NAMESPACE_URL, t)), {"namespace": "default", "doc_id": f"d{i}",
              "text": t, "chunk_index": 0, "embedding_failed": False}, v)
        for i, (t, v) in enumerate(zip(texts, service.embed_passages(texts).vectors))])
    chat.set_faults(lambda request: Fault.stall(600)
                    if any(reply[:30] in text for text in request.inputs) else None)
    llm = ChatClient("fake-chat", base_url=chat.url, timeout_s=30.0, max_attempts=1)

    began = time.monotonic()
    result = search("when do bills arrive", store=edge, service=service, collection="chunks",
                    k=3, mode="dense", hyde=True, llm=llm)

    assert time.monotonic() - began < 1.0 + SLACK_S
    assert len(result.results) == 3  # the plain query's hits
    assert [n for n in result.notes if n.startswith(
        "hyde skipped: the hypothetical passage could not be embedded")], result.notes
    assert len([r for r in chat.embedding_requests()
                if any(reply[:30] in text for text in r.inputs)]) == 1  # no retry past it
