"""EmbeddingService logic with in-process providers, and build_embedding_service."""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Sequence

import pytest

from kbsync.embed import (
    EmbeddingCache,
    EmbeddingService,
    HashEmbedder,
    TextKind,
    build_embedding_service,
    clear_service_cache,
)
from kbsync.errors import EmbeddingPermanentError, EmbeddingTransientError, UsageError
from kbsync.settings import Settings


class CountingHash(HashEmbedder):
    """HashEmbedder that records every batch it is asked for."""

    def __init__(self, dimension: int = 16) -> None:
        super().__init__(dimension)
        self.batches: list[list[str]] = []
        self._lock = threading.Lock()

    def embed_batch(self, texts: Sequence[str], kind: TextKind = TextKind.PASSAGE) -> list[list[float]]:
        with self._lock:
            self.batches.append(list(texts))
        return super().embed_batch(texts, kind)


class AlwaysDown(HashEmbedder):
    """Every call fails transiently, with an optional Retry-After."""

    def __init__(self, retry_after: float | None = None) -> None:
        super().__init__(4)
        self.retry_after = retry_after
        self.calls = 0

    def embed_batch(self, texts, kind=TextKind.PASSAGE):
        self.calls += 1
        raise EmbeddingTransientError("endpoint down", retry_after=self.retry_after)


class Broken(HashEmbedder):
    """Returns a vector that must never be stored."""

    def __init__(self, vector: list[float]) -> None:
        super().__init__(4)
        self.vector = vector

    def embed_batch(self, texts, kind=TextKind.PASSAGE):
        return [list(self.vector) for _ in texts]


@pytest.fixture(autouse=True)
def _fresh_services():
    clear_service_cache()
    yield
    clear_service_cache()


def test_empty_input_calls_nothing() -> None:
    provider = CountingHash()
    outcome = EmbeddingService(provider, cache=None).embed_passages([])
    assert (outcome.vectors, outcome.failed, outcome.all_failed) == ([], [], False)
    assert provider.batches == []


def test_duplicates_computed_once_and_counts_add_up(tmp_path: Path) -> None:
    provider = CountingHash()
    service = EmbeddingService(provider, cache=EmbeddingCache(tmp_path / "c"), batch_size=3)
    texts = ["a", "b", "a", "c", "d", "b", "e"]
    outcome = service.embed_passages(texts)
    assert [t for batch in provider.batches for t in batch] == ["a", "b", "c", "d", "e"]
    assert [len(b) for b in provider.batches] == [3, 2]
    assert (outcome.computed, outcome.cached, outcome.failed_count) == (7, 0, 0)
    assert outcome.vectors[0] == outcome.vectors[2]
    mixed = service.embed_passages(["a", "new", "a"])
    assert (mixed.computed, mixed.cached) == (1, 2)
    assert provider.batches[-1] == ["new"]


def test_computed_and_cached_vectors_are_identical(tmp_path: Path) -> None:
    service = EmbeddingService(HashEmbedder(32), cache=EmbeddingCache(tmp_path / "c"))
    first = service.embed_passages(["float32 exact"]).vectors
    assert service.embed_passages(["float32 exact"]).vectors == first
    assert service.cache is not None and service.cache.hits == 1


def test_query_and_passage_are_cached_apart(tmp_path: Path) -> None:
    provider = CountingHash()
    service = EmbeddingService(provider, cache=EmbeddingCache(tmp_path / "c"))
    service.embed_passages(["same text"])
    service.embed_query("same text")
    service.embed_query("same text")
    assert len(provider.batches) == 2  # passage once, query once, then the cache


@pytest.mark.parametrize(
    ("vector", "match"),
    [([1.0, 0.0, 0.0], "dimension 3, expected 4"), ([float("nan"), 1.0, 0.0, 0.0], "non-finite"),
     ([0.0, 0.0, 0.0, 0.0], "all-zero"), ([1e39, 0.0, 0.0, 0.0], "non-finite")],
    ids=["dimension", "nan", "zero", "float32-overflow"],
)
def test_invalid_vectors_raise_and_are_not_cached(tmp_path: Path, vector, match) -> None:
    cache = EmbeddingCache(tmp_path / "c")
    with pytest.raises(EmbeddingPermanentError, match=match):
        EmbeddingService(Broken(vector), cache=cache).embed_passages(["x"])
    assert len(cache) == 0


def test_backoff_grows_to_its_cap_with_full_jitter() -> None:
    waits: list[float] = []
    provider = AlwaysDown()
    service = EmbeddingService(provider, cache=None, max_attempts=6, backoff_base_s=1.0,
                               backoff_max_s=3.0, sleep=waits.append, rng=random.Random(1))
    outcome = service.embed_passages(["x"])
    assert outcome.all_failed and provider.calls == 6
    assert len(waits) == 5
    assert all(0.0 <= w <= cap for w, cap in zip(waits, [1.0, 2.0, 3.0, 3.0, 3.0]))


def test_retry_after_is_a_floor_with_a_ceiling() -> None:
    waits: list[float] = []
    service = EmbeddingService(AlwaysDown(retry_after=1000.0), cache=None, max_attempts=2,
                               retry_after_max_s=60.0, sleep=waits.append)
    service.embed_passages(["x"])
    assert waits == [60.0]


def test_concurrent_callers_share_cache_and_service(tmp_path: Path) -> None:
    provider = CountingHash()
    service = EmbeddingService(provider, cache=EmbeddingCache(tmp_path / "c"), batch_size=8)
    texts = [f"text {i}" for i in range(100)]
    results: dict[int, object] = {}
    errors: list = []

    def work(offset: int) -> None:
        try:
            results[offset // 25] = service.embed_passages(texts[offset:] + texts[:offset])
        except Exception as exc:  # noqa: BLE001 - surfaced by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k * 25,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 4
    expected = dict(zip(texts, HashEmbedder(16).embed_batch(texts)))
    for k, outcome in results.items():
        order = texts[k * 25:] + texts[: k * 25]
        assert outcome.failed_count == 0
        assert all(abs(a - b) < 1e-6 for t, v in zip(order, outcome.vectors) for a, b in zip(v, expected[t]))
    assert service.stats.computed + service.stats.cached == 400


# -- build_embedding_service ---------------------------------------------------------------
def test_build_hash_service(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, embed_provider="hash", embed_dimensions=64, embed_batch_size=10)
    service = build_embedding_service(settings)
    assert (service.provider, service.model, service.dimension, service.batch_size) == ("hash", "hash-64", 64, 10)
    assert service.cache is not None and Path(service.cache.directory) == tmp_path / "cache"
    assert build_embedding_service(settings) is service  # one per process and configuration


def test_build_openai_service_against_fake_server(tmp_path: Path, fake_server, monkeypatch) -> None:
    monkeypatch.setenv("KBSYNC_HOME", str(tmp_path))
    monkeypatch.setenv("KBSYNC_EMBED_PROVIDER", "openai")
    monkeypatch.setenv("KBSYNC_EMBED_BASE_URL", fake_server.url)
    monkeypatch.setenv("KBSYNC_EMBED_MODEL", "fake-embedding")
    monkeypatch.setenv("KBSYNC_EMBED_API_KEY", "sk-build-SECRET-0000000")
    service = build_embedding_service(Settings())
    assert (service.provider, service.model, service.dimension) == ("openai", "fake-embedding", 8)
    assert service.embed_passages(["hello there"]).computed == 1
    assert "SECRET" not in repr(service) + repr(service._provider)
    assert fake_server.embedding_requests()[-1].headers["authorization"] == "Bearer sk-build-SECRET-0000000"


def test_build_local_rejects_unknown_model_and_wrong_dimensions(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="unknown local embedding model"):
        build_embedding_service(Settings(home=tmp_path, embed_provider="local", embed_model="nope"))
    with pytest.raises(UsageError, match="gives 384"):
        build_embedding_service(Settings(home=tmp_path, embed_provider="local", embed_dimensions=128))
