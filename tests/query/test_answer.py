"""kbsync ask against a real local OpenAI-compatible chat server (tests/fake_openai.py)."""

from __future__ import annotations

import pytest

from fake_openai import FakeOpenAIServer
from kbsync import api
from kbsync.query.answer import check_citations, nothing_found
from kbsync.errors import LLMNotConfigured

DOCS = {
    "kb/keys.md": "# API keys\n\nTessera API keys must be rotated every 90 days. A rotated key "
                  "keeps working for a 24-hour grace period.",
    "kb/deploys.md": "# Deploys\n\nThere are no production deploys on Fridays after 15:00 UTC.",
}


@pytest.fixture
def chat(settings, monkeypatch):
    """A fake chat server and settings pointing at it, with the two documents stored."""
    from kbsync.settings import Settings

    with FakeOpenAIServer(chat_reply="Keys rotate every 90 days [1]; the old key works for "
                                     "24 hours [1, 9]. Deploys stop on Fridays [2][7].") as server:
        monkeypatch.setenv("KBSYNC_LLM_BASE_URL", server.url)
        monkeypatch.setenv("KBSYNC_LLM_MODEL", "fake-chat")
        configured = Settings()
        for doc_id, text in DOCS.items():
            api.add_text(text, doc_id, settings=configured)
        yield server, configured


def test_answer_cites_retrieved_chunks_and_drops_invented_numbers(chat):
    server, settings = chat
    answer = api.ask("How often are API keys rotated?", k=2, min_score=0.0, settings=settings)
    assert answer.answered and answer.context_used == 2
    assert answer.answer == ("Keys rotate every 90 days [1]; the old key works for 24 hours "
                             "[1]. Deploys stop on Fridays [2].")
    assert answer.invented_citations == [7, 9]
    assert any("do not exist" in w for w in answer.warnings)
    top, second = answer.results[0], answer.results[1]
    assert [c.__dict__ for c in answer.citations] == [
        {"n": 1, "doc_id": top.doc_id, "page_start": None, "page_end": None,
         "heading_path": top.heading_path},
        {"n": 2, "doc_id": second.doc_id, "page_start": None, "page_end": None,
         "heading_path": second.heading_path}]
    data = answer.to_dict()
    assert set(data) >= {"answer", "citations", "query", "namespace", "mode", "raw_count",
                         "kept_count", "results", "latency_ms"}
    (request,) = server.chat_requests()
    messages = request.body["messages"]
    assert messages[0]["role"] == "system" and "only" in messages[0]["content"]
    prompt = messages[1]["content"]
    assert prompt.startswith("Passages:\n\n[1] " + top.doc_id)
    assert "\n\n[2] " + second.doc_id in prompt and "[3]" not in prompt
    assert prompt.endswith("Question: How often are API keys rotated?")
    assert request.body["temperature"] == 0.0


def test_nothing_relevant_makes_no_llm_call(chat):
    server, settings = chat
    answer = api.ask("How often are API keys rotated?", min_score=0.99, settings=settings)
    assert not answer.answered and answer.citations == [] and answer.context_used == 0
    assert answer.answer == nothing_found("default")
    assert answer.results  # the search fields still show what was found
    assert server.chat_requests() == []
    empty = api.ask("anything", namespace="empty-ns", settings=settings)
    assert not empty.answered and empty.raw_count == 0 and server.chat_requests() == []


def test_ask_without_a_chat_model_is_a_usage_error(settings):
    with pytest.raises(LLMNotConfigured, match="KBSYNC_LLM_MODEL"):
        api.ask("question", settings=settings)


@pytest.mark.parametrize("text, passages, expected", [
    ("A [1] and B [2].", 2, ("A [1] and B [2].", [1, 2], [])),
    ("A [3].", 2, ("A.", [], [3])),
    ("A [2, 0; 1].", 2, ("A [2, 1].", [2, 1], [0])),
    ("A [1][4] and [1].", 3, ("A [1] and [1].", [1], [4])),
    ("No citation at all, see [link](x).", 2, ("No citation at all, see [link](x).", [], [])),
])
def test_check_citations(text, passages, expected):
    assert check_citations(text, passages) == expected


def test_ask_command_prints_json_and_readable_sources(chat, capsys):
    import argparse
    import json

    from kbsync.app import cli_ask, cli_support

    # One JSON object per process: main() resets that per command, this test calls the
    # command function directly (and runs after other CLI tests), so reset it here.
    cli_support.reset_emitted()
    _, settings = chat
    parser = argparse.ArgumentParser()
    cli_ask.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["ask", "How often are API keys rotated?", "-k", "2",
                              "--min-score", "0", "--json"])
    assert cli_ask.COMMANDS["ask"](args, settings) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["answered"] and [c["n"] for c in data["citations"]] == [1, 2]
    args = parser.parse_args(["ask", "How often are API keys rotated?", "-k", "2",
                              "--min-score", "0"])
    assert cli_ask.run_ask(args, settings) == 0
    out = capsys.readouterr().out
    assert "Sources" in out and "[1] kb/" in out and "[2] kb/" in out
