"""The openai provider and EmbeddingService against a real HTTP server.

The real ``openai`` client talks to :class:`tests.fake_openai.FakeOpenAIServer`
over a socket; faults are injected per request. Each test asserts what the
fault produces: retried and succeeded, split, flagged fallback, or a clear
failure, and counts requests to prove batching and caching.
"""

from __future__ import annotations

import logging
import random
import time
import traceback
from pathlib import Path

import openai
import pytest

from kbsync.embed import EmbeddingCache, EmbeddingService
from kbsync.embed.openai_provider import OpenAIEmbedder
from kbsync.errors import BatchTooLarge, EmbeddingPermanentError, EmbeddingTransientError
from kbsync.openai_http import parse_retry_after
from tests.fake_openai import Fault, FakeOpenAIServer

KEY = "sk-test-SECRETKEY-0123456789"


def _close(got: list[list[float]], want: list[list[float]], tol: float = 1e-6) -> bool:
    """Equal up to float32 rounding (the service returns float32-exact values)."""
    return len(got) == len(want) and all(
        len(g) == len(w) and all(abs(a - b) <= tol for a, b in zip(g, w)) for g, w in zip(got, want)
    )


def _texts(n: int, prefix: str = "chunk") -> list[str]:
    return [f"{prefix} number {i} about vectors" for i in range(n)]


def _embedder(server: FakeOpenAIServer, **kwargs) -> OpenAIEmbedder:
    kwargs.setdefault("dimensions", server.dimension)
    kwargs.setdefault("timeout_s", 5.0)
    return OpenAIEmbedder("fake-embedding", base_url=server.url, api_key=KEY, **kwargs)


def _service(server: FakeOpenAIServer, sleeps, *, cache=None, embedder=None, **kwargs) -> EmbeddingService:
    return EmbeddingService(embedder or _embedder(server), cache=cache, sleep=sleeps,
                            rng=random.Random(0), **kwargs)


# -- success paths --------------------------------------------------------------------------
def test_vectors_come_back_in_input_order_with_dimension_sent(fake_server, sleeps) -> None:
    texts = _texts(5)
    outcome = _service(fake_server, sleeps).embed_passages(texts)
    assert _close(outcome.vectors, fake_server.vectors_for(texts))
    assert (outcome.computed, outcome.cached, outcome.failed_count, outcome.failed) == (5, 0, 0, [False] * 5)
    (request,) = fake_server.embedding_requests()
    assert request.body["dimensions"] == 8 and request.body["encoding_format"] == "float"
    assert request.headers["authorization"] == f"Bearer {KEY}"


def test_shuffled_index_order_is_put_back(fake_server, sleeps) -> None:
    fake_server.set_faults([Fault.shuffled()])
    texts = _texts(4)
    outcome = _service(fake_server, sleeps).embed_passages(texts)
    assert _close(outcome.vectors, fake_server.vectors_for(texts))


def test_dimension_probed_once_when_not_configured(fake_server, sleeps) -> None:
    embedder = _embedder(fake_server, dimensions=None)
    service = _service(fake_server, sleeps, embedder=embedder)
    assert service.dimension == 8
    service.embed_passages(_texts(3))
    probe, batch = fake_server.embedding_requests()
    assert "dimensions" not in probe.body and "dimensions" not in batch.body
    assert len(probe.inputs) == 1 and len(batch.inputs) == 3


def test_batches_of_batch_size(fake_server, sleeps) -> None:
    outcome = _service(fake_server, sleeps, batch_size=64).embed_passages(_texts(150))
    assert [len(r.inputs) for r in fake_server.embedding_requests()] == [64, 64, 22]  # ceil(150/64)
    assert outcome.computed == 150


def test_cache_means_no_second_request(tmp_path: Path, fake_server, sleeps) -> None:
    cache = EmbeddingCache(tmp_path / "cache")
    service = _service(fake_server, sleeps, cache=cache)
    texts = _texts(10) + _texts(3)  # within-call duplicates are sent once
    first = service.embed_passages(texts)
    assert len(fake_server.embedding_requests()) == 1
    assert len(fake_server.embedding_requests()[0].inputs) == 10
    assert (first.computed, first.cached) == (13, 0)
    second = service.embed_passages(texts)
    assert len(fake_server.embedding_requests()) == 1
    assert (second.computed, second.cached) == (0, 13)
    assert second.vectors == first.vectors
    # The key is nowhere in the cache's files.
    for path in (tmp_path / "cache").rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes()


def test_truncation_is_counted_and_logged(fake_server, sleeps, caplog) -> None:
    embedder = _embedder(fake_server, max_input_chars=10)
    with caplog.at_level(logging.WARNING):
        outcome = _service(fake_server, sleeps, embedder=embedder).embed_passages(["short", "x" * 50, "y" * 11])
    assert outcome.truncated == 2 and embedder.truncated_inputs == 2
    assert [len(t) for t in fake_server.embedding_requests()[0].inputs] == [5, 10, 10]
    assert "cut 2 of 3 inputs" in caplog.text


# -- transient faults: retried ---------------------------------------------------------------
def test_429_retry_after_is_honoured(fake_server, sleeps) -> None:
    fake_server.set_faults([Fault.rate_limited(retry_after=7)])
    outcome = _service(fake_server, sleeps).embed_passages(_texts(3))
    assert outcome.computed == 3 and outcome.retries == 1
    assert len(sleeps.calls) == 1 and sleeps.calls[0] >= 7.0
    assert len(fake_server.embedding_requests()) == 2


@pytest.mark.parametrize("fault", [Fault.error(500), Fault.error(503), Fault.error(408), Fault.error(409),
                                   Fault.drop_connection()], ids=["500", "503", "408", "409", "dropped"])
def test_transient_status_then_success(fake_server, sleeps, fault) -> None:
    fake_server.set_faults([fault, fault])
    outcome = _service(fake_server, sleeps, backoff_base_s=0.5).embed_passages(_texts(2))
    assert outcome.computed == 2 and outcome.failed_count == 0
    assert len(fake_server.embedding_requests()) == 3
    # full jitter under an exponential ceiling: 0.5 then 1.0
    assert 0 <= sleeps.calls[0] <= 0.5 and 0 <= sleeps.calls[1] <= 1.0


def test_stall_past_client_timeout_is_retried(fake_server, sleeps) -> None:
    fake_server.set_faults([Fault.stall(5.0)])
    embedder = _embedder(fake_server, timeout_s=0.5)
    started = time.monotonic()
    outcome = _service(fake_server, sleeps, embedder=embedder).embed_passages(_texts(2))
    elapsed = time.monotonic() - started
    assert outcome.computed == 2 and outcome.retries == 1
    assert 0.5 <= elapsed < 4.0  # gave up at the client timeout, did not wait for the stall


def test_openai_client_itself_never_retries(fake_server, sleeps) -> None:
    fake_server.set_faults([Fault.error(503)])
    # One text: a failed batch of several would be bisected (tests/embed/test_embed_bisect.py).
    outcome = _service(fake_server, sleeps, max_attempts=1).embed_passages(_texts(1))
    assert outcome.failed == [True] and outcome.bisect_requests == 0
    assert len(fake_server.embedding_requests()) == 1


def test_random_transient_faults_everything_embedded(tmp_path: Path, fake_server, sleeps) -> None:
    chance = random.Random(7)
    fake_server.set_faults(lambda request: Fault.error(503) if chance.random() < 0.2 else None)
    service = _service(fake_server, sleeps, cache=EmbeddingCache(tmp_path / "c"), batch_size=16)
    texts = _texts(400)
    outcome = service.embed_passages(texts)
    assert outcome.failed_count == 0 and outcome.retries > 0
    assert _close(outcome.vectors, fake_server.vectors_for(texts))


# -- exhausted attempts: flagged fallback --------------------------------------------------------
def test_exhausted_batch_gets_zero_vectors_and_flags(tmp_path: Path, fake_server, sleeps) -> None:
    first_batch = set(_texts(2))
    # Every request holding a text of the first batch fails: its attempts, then both halves
    # of its bisection (which stops there: both halves failing transiently looks like an outage).
    fake_server.set_faults(lambda r: Fault.error(503) if first_batch & set(r.inputs) else None)
    cache = EmbeddingCache(tmp_path / "c")
    service = _service(fake_server, sleeps, cache=cache, batch_size=2, max_attempts=3)
    outcome = service.embed_passages(_texts(4))
    assert outcome.failed == [True, True, False, False]
    assert outcome.vectors[0] == [0.0] * 8 and any(outcome.vectors[2])
    assert (outcome.computed, outcome.failed_count, outcome.all_failed) == (2, 2, False)
    assert outcome.bisect_requests == 2 and len(fake_server.embedding_requests()) == 3 + 2 + 1
    # Failed vectors are never cached: the next call computes them.
    fake_server.set_faults(None)
    again = service.embed_passages(_texts(4))
    assert (again.computed, again.cached, again.failed_count) == (2, 2, 0)


def test_all_batches_fail_is_reported_not_raised(fake_server, sleeps, caplog) -> None:
    fake_server.set_faults(lambda request: Fault.error(503))
    service = _service(fake_server, sleeps, batch_size=10, max_attempts=3, fail_fast_after=2)
    with caplog.at_level(logging.WARNING):
        outcome = service.embed_passages(_texts(50))
    assert outcome.all_failed and outcome.failed_count == 50 and outcome.computed == 0
    assert all(v == [0.0] * 8 for v in outcome.vectors)
    # 2 batches x 3 attempts, then one attempt per batch while the endpoint looks down; the
    # first batch's bisection stops after its two halves (both transient), the others skip it.
    assert len(fake_server.embedding_requests()) == 3 + 2 + 3 + 1 + 1 + 1
    assert outcome.bisect_requests == 2
    assert "chunk number" not in caplog.text  # counts are logged, texts are not
    fake_server.set_faults(None)
    assert service.embed_passages(_texts(3)).computed == 3  # one success closes the breaker


def test_query_has_no_fallback(fake_server, sleeps) -> None:
    fake_server.set_faults(lambda request: Fault.error(500))
    service = _service(fake_server, sleeps, max_attempts=2)
    with pytest.raises(EmbeddingTransientError):
        service.embed_query("what is qdrant")
    assert len(fake_server.embedding_requests()) == 2


# -- batch too large: split and remembered ------------------------------------------------------
@pytest.mark.parametrize("status", [413, 400])
def test_batch_too_large_splits_and_remembers(fake_server, sleeps, status) -> None:
    fake_server.max_batch, fake_server.batch_status = 10, status
    service = _service(fake_server, sleeps, batch_size=64)
    texts = _texts(64)
    outcome = service.embed_passages(texts)
    assert outcome.computed == 64 and not sleeps.calls
    assert _close(outcome.vectors, fake_server.vectors_for(texts))
    sizes = [len(r.inputs) for r in fake_server.embedding_requests()]
    assert sizes[:4] == [64, 32, 16, 8] and set(sizes[4:]) == {8}
    assert service.batch_size == 8
    fake_server.reset()
    service.embed_passages(_texts(20, prefix="more"))
    assert [len(r.inputs) for r in fake_server.embedding_requests()] == [8, 8, 4]  # no refused request


def test_provider_raises_batch_too_large(fake_server) -> None:
    fake_server.max_batch = 1
    with pytest.raises(BatchTooLarge, match="HTTP 413"):
        _embedder(fake_server).embed_batch(["a", "b"])


def test_single_input_refused_is_a_clear_error(fake_server, sleeps) -> None:
    fake_server.max_batch = 0
    with pytest.raises(EmbeddingPermanentError, match="refuses even one input"):
        _service(fake_server, sleeps).embed_passages(_texts(4))


# -- permanent faults: fail fast -------------------------------------------------------------
@pytest.mark.parametrize(
    ("fault", "match"),
    [
        (Fault.malformed(), "malformed response"),
        (Fault.too_few(1), "2 vectors for 3 inputs"),
        (Fault.wrong_dimension(5), "got 5, expected 8"),
        (Fault.non_finite(), "non-finite"),
        (Fault(status=200, raw_body=b"<html>bad gateway</html>", content_type="text/html"), "malformed"),
        (Fault.error(404, "model not found"), "HTTP 404"),
        (Fault.error(429, "You exceeded your current quota", error_type="insufficient_quota"), "quota"),
    ],
    ids=["bad-json", "too-few", "wrong-dim", "nan", "html", "404", "quota"],
)
def test_wrong_answers_raise_without_retry(fake_server, sleeps, fault, match) -> None:
    fake_server.set_faults([fault])
    with pytest.raises(EmbeddingPermanentError, match=match) as info:
        _service(fake_server, sleeps).embed_passages(_texts(3))
    assert "fake-embedding" in str(info.value) and fake_server.url in str(info.value)
    assert len(fake_server.embedding_requests()) == 1 and not sleeps.calls


def test_401_fails_fast_and_never_shows_the_key(tmp_path: Path, sleeps, caplog) -> None:
    with FakeOpenAIServer(dimension=8, require_key="the-right-one") as server, caplog.at_level(logging.DEBUG):
        service = _service(server, sleeps, cache=EmbeddingCache(tmp_path / "c"))
        started = time.monotonic()
        with pytest.raises(EmbeddingPermanentError) as info:
            service.embed_passages(_texts(3))
        assert time.monotonic() - started < 2.0
        assert len(server.embedding_requests()) == 1 and not sleeps.calls
    # The server echoed the key it received; none of it reaches us.
    shown = "".join(traceback.format_exception(info.value)) + repr(info.value) + caplog.text
    assert KEY not in shown and "SECRETKEY" not in shown
    assert "HTTP 401" in str(info.value) and "/v1/embeddings" in str(info.value)
    assert "fake-embedding" in str(info.value) and "KBSYNC_EMBED_API_KEY" in str(info.value)
    assert KEY not in repr(service._provider)


# -- helpers and the fake server itself ---------------------------------------------------------
def test_parse_retry_after() -> None:
    assert parse_retry_after({"retry-after": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert parse_retry_after({}) is None and parse_retry_after({"retry-after": "soon"}) is None
    later = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 <= parse_retry_after({"retry-after": later}) <= 31


def test_fake_server_speaks_base64_and_chat(fake_server) -> None:
    client = openai.OpenAI(base_url=fake_server.url, api_key="k", max_retries=0)
    texts = ["alpha beta", "gamma"]
    default = client.embeddings.create(model="m", input=texts)  # the client asks for base64
    assert fake_server.requests[-1].body["encoding_format"] == "base64"
    assert _close([d.embedding for d in default.data], fake_server.vectors_for(texts))

    fake_server.chat_reply = lambda body: "echo: " + body["messages"][-1]["content"]
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content == "echo: hi"
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "yo"}], stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "echo: yo"
    assert len(fake_server.chat_requests()) == 2
    assert [m.id for m in client.models.list()] == ["fake-embedding"]
