"""Fixtures for the query tests: an embedded store, a hash-embedding service, a chat server."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

# ``tests.fake_openai`` is shared with other test areas; make the repo root importable.
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from kbsync.embed import EmbeddingService, HashEmbedder  # noqa: E402
from kbsync.embed.base import TextKind  # noqa: E402
from kbsync.store.edge.store import EdgeStore  # noqa: E402
from tests.fake_openai import FakeOpenAIServer  # noqa: E402

DIM = 64


class RecordingService:
    """A real EmbeddingService that also records which texts were embedded as what."""

    def __init__(self, dimension: int = DIM) -> None:
        self._service = EmbeddingService(HashEmbedder(dimension), cache=None)
        self.queries: list[str] = []
        self.passages: list[str] = []

    @property
    def dimension(self) -> int:
        return self._service.dimension

    def query_dimension(self) -> int:
        return self._service.query_dimension()

    @property
    def provider(self) -> str:
        return self._service.provider

    @property
    def model(self) -> str:
        return self._service.model

    def embed_query(self, text: str, *, kind=TextKind.QUERY) -> list[float]:
        (self.passages if kind is TextKind.PASSAGE else self.queries).append(text)
        return self._service.embed_query(text, kind=kind)

    def embed_passages(self, texts):
        self.passages.extend(texts)
        return self._service.embed_passages(texts)


@pytest.fixture
def service() -> RecordingService:
    return RecordingService()


@pytest.fixture
def edge(tmp_path: Path) -> Iterator[EdgeStore]:
    with EdgeStore(tmp_path / "qdrant") as store:
        yield store


@pytest.fixture
def chat() -> Iterator[FakeOpenAIServer]:
    """A started fake OpenAI-compatible server; set ``chat_reply`` per test."""
    with FakeOpenAIServer(dimension=8) as server:
        yield server
