"""A poisoned input costs only itself (issue 11.6).

The real ``openai`` client talks to tests/fake_openai.py, which refuses every
request that holds a poisoned text (a 400, or a 500 for the transient flavour)
and answers the rest. A batch that fails for good is bisected down to the
poisoned inputs: only those fall back to flagged zero vectors, the rest is
embedded and cached, and the requests bisection cost are counted up to the
ingest JSON summary. An outage (every request failing) stays an outage, and
costs a bounded number of requests.
"""

from __future__ import annotations

import math
import os
import random

import pytest

from kbsync.ingest.discover import parse_root
from kbsync.embed import EmbeddingCache, EmbeddingService, clear_service_cache
from kbsync.embed.bisect import bisect_budget
from kbsync.embed.openai_provider import OpenAIEmbedder
from kbsync.errors import InputRejected
from kbsync.ingest.runner import run_plain
from kbsync.runtime import Runtime
from kbsync.settings import Settings
from tests.fake_openai import Fault, FakeOpenAIServer

POISON = "POISON-PILL"


def _rejecting(status: int = 400, marker: str = POISON):
    """A fault plan refusing any embeddings request with an input containing ``marker``."""
    def plan(request):
        if any(marker in text for text in request.inputs):
            return Fault.error(status, "input contains content this model will not embed",
                               error_type="invalid_request_error")
        return None
    return plan


def _service(server: FakeOpenAIServer, sleeps, **kwargs) -> EmbeddingService:
    embedder = OpenAIEmbedder("fake-embedding", base_url=server.url, api_key="k",
                              dimensions=server.dimension, timeout_s=5.0)
    kwargs.setdefault("batch_size", 64)
    return EmbeddingService(embedder, sleep=sleeps, rng=random.Random(0), **kwargs)


def _texts(n: int, poisoned: set[int]) -> list[str]:
    return [f"chunk {i} about vectors" + (f" {POISON}" if i in poisoned else "") for i in range(n)]


def test_only_the_poisoned_inputs_fall_back(tmp_path, fake_server, sleeps) -> None:
    fake_server.set_faults(_rejecting(400))
    poisoned = {5, 100}  # one in each of the first two batches of 64
    texts = _texts(150, poisoned)
    service = _service(fake_server, sleeps, cache=EmbeddingCache(tmp_path / "c"))

    outcome = service.embed_passages(texts)

    assert [i for i, f in enumerate(outcome.failed) if f] == sorted(poisoned)
    assert (outcome.computed, outcome.failed_count, outcome.all_failed) == (148, 2, False)
    clean = [i for i in range(150) if i not in poisoned]
    want = fake_server.vectors_for([texts[i] for i in clean])
    assert all(max(abs(a - b) for a, b in zip(outcome.vectors[i], w)) < 1e-6 for i, w in zip(clean, want))
    assert outcome.vectors[5] == [0.0] * 8
    # One poisoned input in 64 costs two requests per halving: 2 * log2(64) = 12.
    assert outcome.bisect_requests == 2 * 12 == service.stats.bisect_requests
    assert len(fake_server.embedding_requests()) == 3 + 24
    assert not sleeps.calls  # a rejection is not retried, and bisection never waits

    # The rest was cached; the poisoned inputs are tried again (and refused again).
    again = service.embed_passages(texts)
    assert (again.cached, again.computed, again.failed_count) == (148, 0, 2)


def test_two_poisoned_inputs_in_one_batch_are_both_isolated(fake_server, sleeps) -> None:
    fake_server.set_faults(_rejecting(400))
    service = _service(fake_server, sleeps, cache=None)
    assert service.embed_passages(_texts(3, set())).computed == 3  # the endpoint has answered

    outcome = service.embed_passages(_texts(64, {3, 40}))

    assert [i for i, f in enumerate(outcome.failed) if f] == [3, 40]
    assert 0 < outcome.bisect_requests <= bisect_budget(64) == 24


def test_a_transient_poison_is_isolated_after_the_batch_retries(fake_server, sleeps) -> None:
    fake_server.set_faults(_rejecting(500))  # some servers answer a bad input with a 500
    service = _service(fake_server, sleeps, cache=None, batch_size=16, max_attempts=3)

    outcome = service.embed_passages(_texts(32, {20}))

    assert [i for i, f in enumerate(outcome.failed) if f] == [20]
    assert outcome.retries == 2 and len(sleeps.calls) == 2  # the batch's own retries only
    assert outcome.bisect_requests == 2 * int(math.log2(16))


def test_a_400_on_every_request_is_a_configuration_error(fake_server, sleeps) -> None:
    fake_server.set_faults(lambda request: Fault.error(400, "dimensions is not supported by this model"))
    service = _service(fake_server, sleeps, cache=None)

    with pytest.raises(InputRejected, match="HTTP 400: dimensions is not supported"):
        service.embed_passages(_texts(64, set()))

    assert len(fake_server.embedding_requests()) == 1 + 2  # the batch, then its two halves


def test_an_outage_is_not_bisected_endlessly(fake_server, sleeps) -> None:
    fake_server.set_faults(lambda request: Fault.error(503))
    service = _service(fake_server, sleeps, cache=None, batch_size=64, max_attempts=2)

    outcome = service.embed_passages(_texts(64 * 6, set()))

    assert outcome.all_failed and outcome.failed_count == 64 * 6
    # Batch 1: 2 attempts + 2 halves (both transient: stop). Batch 2: 2 attempts, after
    # which the endpoint counts as down: no bisection, one attempt per further batch.
    assert outcome.bisect_requests == 2
    assert len(fake_server.embedding_requests()) == 2 + 2 + 2 + 4


def _settings(tmp_path, monkeypatch, server: FakeOpenAIServer) -> Settings:
    for key in list(os.environ):
        if key.startswith("KBSYNC_"):
            monkeypatch.delenv(key)
    for key, value in {"HOME": str(tmp_path / "home"), "CONVERT_ISOLATION": "false",
                       "EMBED_PROVIDER": "openai", "EMBED_BASE_URL": server.url,
                       "EMBED_MODEL": "fake-embedding", "EMBED_DIMENSIONS": "8"}.items():
        monkeypatch.setenv(f"KBSYNC_{key}", value)
    return Settings()


def test_ingest_stores_the_rest_and_reports_the_bisection(tmp_path, monkeypatch, fake_server) -> None:
    share = tmp_path / "share"
    share.mkdir()
    # 70 paragraphs under their own headings: 70 chunks, so two batches of 64 and 6.
    sections = [f"# Part {i}\n\nParagraph {i} explains how the sync keeps vectors current."
                for i in range(70)]
    sections[10] += f" {POISON}"
    (share / "guide.md").write_text("\n\n".join(sections), encoding="utf-8")
    (share / "other.md").write_text("# Other\n\nA clean document about key rotation.", encoding="utf-8")
    fake_server.set_faults(_rejecting(400))
    runtime = Runtime.open(_settings(tmp_path, monkeypatch, fake_server))
    try:
        summary = run_plain([parse_root(str(share))], runtime=runtime).to_dict()
    finally:
        runtime.close()
        clear_service_cache()

    assert (summary["added"], summary["failed"], summary["partial"]) == (2, 0, 1)
    assert summary["embeddings_failed"] == 1 and summary["embeddings_computed"] == 70
    assert summary["embedding_bisect_requests"] == 12
