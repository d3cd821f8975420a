"""A whole ingest through the real openai client against a flaky endpoint.

20% of requests fail transiently (500, 503, 429 with Retry-After, a stall past
the client timeout); every document must still end up searchable.
"""

from __future__ import annotations

import random
import shutil

from fake_openai import Fault, FakeOpenAIServer
from kbtest import SAMPLE
from kbsync.ingest.discover import parse_root
from kbsync.ingest.runner import run_plain
from kbsync.query.search import search
from kbsync.store.base import Filter


def test_every_document_becomes_searchable_despite_20_percent_faults(tmp_path, monkeypatch):
    from kbsync.embed import clear_service_cache
    from kbsync.runtime import Runtime
    from kbsync.settings import Settings

    rng = random.Random(7)
    faults = [Fault.error(500), Fault.error(503), Fault.rate_limited(retry_after=0.01),
              Fault.stall(1.5)]

    def plan(_request):
        return rng.choice(faults) if rng.random() < 0.2 else None

    share = tmp_path / "sample"
    shutil.copytree(SAMPLE, share)
    with FakeOpenAIServer(dimension=64, faults=plan) as server:
        for key, value in {"HOME": str(tmp_path / "home"), "EMBED_PROVIDER": "openai",
                           "EMBED_BASE_URL": server.url, "EMBED_API_KEY": "sk-test-secret",
                           "EMBED_MODEL": "fake-embedding", "EMBED_DIMENSIONS": "64",
                           "EMBED_BATCH_SIZE": "4", "EMBED_TIMEOUT_S": "0.5",
                           "EMBED_MAX_ATTEMPTS": "8"}.items():
            monkeypatch.setenv(f"KBSYNC_{key}", value)
        clear_service_cache()
        runtime = Runtime.open(Settings())
        runtime.service.backoff_base_s = runtime.service.backoff_max_s = 0.05
        try:
            summary = run_plain([parse_root(str(share))], runtime=runtime)
            assert summary.failed == 0 and summary.embeddings_failed == 0
            assert summary.added == summary.files_seen > 10
            answered = [r.status for r in server.embedding_requests()]
            assert sum(1 for s in answered if s != 200) >= 2  # the faults really happened
            for doc_id in runtime.states.load("default"):
                assert runtime.store.count(runtime.collection, Filter.where(doc_id=doc_id)) > 0
            assert runtime.store.count(runtime.collection,
                                       Filter.where(embedding_failed=True)) == 0
            hits = search("rotate API keys", store=runtime.store, service=runtime.service,
                          collection=runtime.collection, k=3)
            assert hits.results
        finally:
            runtime.close()
            clear_service_cache()
