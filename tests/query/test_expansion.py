"""MQE and HyDE through a real OpenAI-compatible HTTP server (tests/fake_openai.py)
and the real ``openai`` client; the chat client's retries and error types.
"""

from __future__ import annotations

import uuid

import pytest

from kbsync.errors import (LLMNotConfigured, LLMPermanentError, LLMTransientError, PermanentError,
                           TransientError, UsageError)
from kbsync.query.expand import HYDE_SYSTEM, parse_rephrasings
from kbsync.query.llm import ChatClient, chat_model
from kbsync.query.search import search
from kbsync.settings import Settings
from kbsync.text.sparse import encode_document
from kbsync.store import Point
from tests.fake_openai import Fault

COLL = "chunks"
K = 3
TOPICS = ("rotate signing keys every ninety days with keyctl",
          "invoices are emailed on the first business day",
          "the uploader retries a failed part three times",
          "quota alerts fire at eighty percent of the plan",
          "export jobs write parquet files to the bucket")


@pytest.fixture
def kb(edge, service):
    """40 one-chunk documents in namespace ``default`` (more than k * 4 per search)."""
    edge.ensure_collection(COLL, dimension=service.dimension, keyword_indexes=("namespace",),
                           sparse=True)
    texts = [f"{TOPICS[i % len(TOPICS)]} (note {i})" for i in range(40)]
    vectors = service._service.embed_passages(texts).vectors
    edge.upsert(COLL, [
        Point(str(uuid.uuid5(uuid.NAMESPACE_URL, t)), {"namespace": "default", "doc_id": f"d{i}",
              "text": t, "chunk_index": 0, "embedding_failed": False}, v, encode_document(t))
        for i, (t, v) in enumerate(zip(texts, vectors))])
    return edge


def client(chat, **kwargs) -> ChatClient:
    return ChatClient("fake-chat", base_url=chat.url, api_key="sk-test-key-123456",
                      sleep=lambda s: None, **kwargs)


def run(kb, service, query: str, **options):
    options.setdefault("mode", "dense")  # these tests measure the expansions on dense search
    return search(query, store=kb, service=service, collection=COLL, k=K, **options)


def test_mqe_searches_every_rephrasing_and_merges_by_best_score(kb, service, chat) -> None:
    chat.chat_reply = "1. invoices emailed first business day\n2) \"uploader retries failed part\"\n"
    result = run(kb, service, "when do bills arrive", mqe=2, llm=client(chat))
    assert result.expansions == ["invoices emailed first business day",
                                 "uploader retries failed part"]
    assert service.queries == ["when do bills arrive", *result.expansions]
    assert result.raw_count == 3 * K * 4
    assert result.notes == []
    ids = [h.doc_id for h in result.results]
    assert len(ids) == len(set(ids)) == K
    assert [h.score for h in result.results] == sorted((h.score for h in result.results),
                                                       reverse=True)
    assert "invoices" in result.results[0].text  # found through the rephrasing alone
    (request,) = chat.chat_requests()
    system, user = request.body["messages"]
    assert user == {"role": "user", "content": "when do bills arrive"}
    assert "2 different rephrasings" in system["content"] and "same language" in system["content"]
    assert request.body["model"] == "fake-chat"


def test_mqe_reply_is_parsed_robustly(kb, service, chat) -> None:
    chat.chat_reply = ("Here are three rephrasings:\n\n1. Key rotation\n- key rotation\n"
                       "2. When do bills arrive\n")
    result = run(kb, service, "when do bills arrive", mqe=3, llm=client(chat))
    assert result.expansions == ["Key rotation"]
    assert result.raw_count == 2 * K * 4
    assert result.notes == ["mqe: the chat model gave 1 usable rephrasings of 3 asked"]


def test_mqe_keeps_the_query_language() -> None:
    reply = "1、如何轮换签名密钥\n2、密钥多久轮换一次\n（3）如何轮换签名密钥"
    assert parse_rephrasings(reply, "密钥轮换", 3) == ["如何轮换签名密钥", "密钥多久轮换一次"]


def test_hyde_passage_is_embedded_as_a_passage(kb, service, chat) -> None:
    passage = "Signing keys are rotated every ninety days with the keyctl tool."
    chat.chat_reply = f"  {passage}\n"
    result = run(kb, service, "how often do keys change", hyde=True, llm=client(chat))
    assert result.expansions == [passage]
    assert service.queries == ["how often do keys change"]
    assert service.passages == [passage]
    assert result.raw_count == 2 * K * 4
    assert "rotate signing keys" in result.results[0].text
    (request,) = chat.chat_requests()
    assert request.body["messages"][0]["content"] == HYDE_SYSTEM


def test_mqe_and_hyde_together_in_hybrid_mode(kb, service, chat) -> None:
    def reply(body: dict) -> str:
        if body["messages"][0]["content"] == HYDE_SYSTEM:
            return "Quota alerts fire at eighty percent."
        return "quota alert threshold\nwhen does the quota alert fire"

    chat.chat_reply = reply
    result = run(kb, service, "quota warning", mqe=2, hyde=True, mode="hybrid", llm=client(chat))
    assert len(chat.chat_requests()) == 2
    assert result.expansions == ["quota alert threshold", "when does the quota alert fire",
                                 "Quota alerts fire at eighty percent."]
    assert result.raw_count == 4 * K * 4
    assert "quota alerts" in result.results[0].text


def test_failing_model_falls_back_to_the_plain_query(kb, service, chat, caplog) -> None:
    plain = run(kb, service, "invoice dates")
    chat.set_faults(lambda request: Fault.error(500, "model crashed"))
    result = run(kb, service, "invoice dates", mqe=2, hyde=True, llm=client(chat))
    assert len(chat.chat_requests()) == 4  # two attempts for each of MQE and HyDE
    assert result.expansions == []
    assert result.raw_count == K * 4
    assert [h.doc_id for h in result.results] == [h.doc_id for h in plain.results]
    assert len(result.notes) == 2
    assert result.notes[0].startswith("mqe skipped: the chat model failed (LLMTransientError:")
    assert "HTTP 500: model crashed" in result.notes[0]
    assert result.notes[1].startswith("hyde skipped:")
    assert "sk-test-key-123456" not in " ".join(result.notes)
    assert "mqe skipped" in caplog.text  # logged as a warning too


def test_no_model_configured_is_a_note(kb, service, settings) -> None:
    assert chat_model(settings, optional=True) is None
    with pytest.raises(LLMNotConfigured) as info:
        ChatClient.from_settings(settings)
    assert isinstance(info.value, UsageError)
    result = run(kb, service, "invoice dates", mqe=3, hyde=True, llm=None)
    assert result.raw_count == K * 4 and result.expansions == []
    assert result.notes == ["query expansion (mqe/hyde) skipped: no chat model configured "
                            "(set KBSYNC_LLM_MODEL); searched the plain query only"]


def test_bad_expansion_arguments(kb, service) -> None:
    with pytest.raises(ValueError):
        run(kb, service, "x", mqe=11)
    with pytest.raises(ValueError):
        run(kb, service, "x", mqe=-1)


# --- the chat client on its own -------------------------------------------------------------
def test_client_from_settings(chat, monkeypatch) -> None:
    monkeypatch.setenv("KBSYNC_LLM_MODEL", "fake-chat")
    monkeypatch.setenv("KBSYNC_LLM_BASE_URL", chat.url)
    monkeypatch.setenv("KBSYNC_LLM_API_KEY", "sk-secret-abcdef")
    settings = Settings()
    assert "sk-secret" not in repr(settings) and "sk-secret" not in str(settings.public_dict())
    llm = chat_model(settings, optional=True)
    assert llm.complete("system", "user") == "fake reply"
    assert chat.requests[0].headers["authorization"] == "Bearer sk-secret-abcdef"
    assert "sk-secret" not in repr(llm)


def test_client_retries_transient_errors_then_answers(chat) -> None:
    waits: list[float] = []
    llm = ChatClient("m", base_url=chat.url, sleep=waits.append, max_attempts=3)
    chat.set_faults([Fault.rate_limited(retry_after=1), Fault.error(503)])
    assert llm.complete("s", "u", max_tokens=5) == "fake reply"
    assert len(chat.chat_requests()) == 3
    assert len(waits) == 2 and waits[0] >= 1.0  # Retry-After honoured
    assert chat.chat_requests()[0].body["max_tokens"] == 5


def test_client_does_not_retry_permanent_errors_and_hides_the_key(chat) -> None:
    chat.require_key = "right-key"
    llm = client(chat, max_attempts=3)
    with pytest.raises(LLMPermanentError, match="HTTP 401.*KBSYNC_LLM_API_KEY") as info:
        llm.complete("s", "u")
    assert isinstance(info.value, PermanentError)
    assert "sk-test-key-123456" not in str(info.value)  # the server echoed it; scrubbed
    assert len(chat.chat_requests()) == 1


@pytest.mark.parametrize(("fault", "error"), [
    (Fault.stall(2.0), LLMTransientError),
    (Fault.drop_connection(), LLMTransientError),
    (Fault.malformed(b"not json"), LLMPermanentError),
    (Fault.error(404, "no such model"), LLMPermanentError),
])
def test_client_errors_are_typed(chat, fault, error) -> None:
    chat.set_faults(lambda request: fault)
    llm = client(chat, timeout_s=0.5, max_attempts=2)
    with pytest.raises(error) as info:
        llm.complete("s", "u")
    assert isinstance(info.value, TransientError) is (error is LLMTransientError)


def test_empty_reply_is_an_error_not_an_empty_string(chat) -> None:
    chat.chat_reply = "   "
    with pytest.raises(LLMPermanentError, match="empty reply"):
        client(chat).complete("s", "u")
