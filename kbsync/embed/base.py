"""The embedding provider interface.

A provider turns texts into vectors and nothing more: batching, caching,
retries and fallback live in :mod:`kbsync.embed.service` so every provider
gets them the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Protocol, Sequence, runtime_checkable

if TYPE_CHECKING:  # the type only
    from kbsync.text.chunk import InputFit


class TextKind(str, Enum):
    """Some models (e5) embed queries and passages with different prefixes."""

    QUERY = "query"
    PASSAGE = "passage"


@dataclass
class BatchResult:
    """One provider call's vectors and how many of its inputs were cut to fit."""

    vectors: list[list[float]]
    truncated: int = 0
    requests: int = 0  # bisection requests behind these vectors (0 for one plain call)


@dataclass
class EmbedOutcome:
    """Vectors for one :meth:`Embedder.embed_passages` call.

    Invariants: ``len(vectors) == len(failed) == number of inputs``, in input
    order; ``computed + cached + failed_count == number of inputs`` (counted per
    input position: a text repeated in the call is sent once but counted at
    each position); a failed position holds a zero vector.
    """

    vectors: list[list[float]]
    failed: list[bool]
    computed: int = 0
    cached: int = 0
    failed_count: int = 0
    truncated: int = 0
    retries: int = 0  # transient errors retried during this call
    bisect_requests: int = 0  # requests spent isolating the inputs of failed batches

    @property
    def all_failed(self) -> bool:
        """True when some text needed computing and none could be computed."""
        return self.failed_count > 0 and self.computed == 0


@runtime_checkable
class EmbeddingProvider(Protocol):
    """Embeds one batch of texts.

    Attributes:
        provider: ``local`` | ``hash`` | ``openai``.
        model: the model id, part of every cache key.
        dimension: length of every vector returned.
    """

    provider: str
    model: str

    @property
    def dimension(self) -> int: ...  # read-only: the real providers compute it

    def embed_batch(self, texts: Sequence[str], kind: TextKind) -> list[list[float]]:
        """Return one vector per text, in input order.

        Raises:
            EmbeddingTransientError: retrying may help (429, 5xx, timeout).
            EmbeddingPermanentError: it will not (401, 400, malformed reply).
        """


@runtime_checkable
class Embedder(Protocol):
    """What the ingest and query sides need of an embedding service
    (:class:`kbsync.embed.service.EmbeddingService` is the one implementation).

    ``embed_passages`` never raises for one bad text: a text that fails after
    retries gets the flagged zero vector (``outcome.failed``); it raises only
    for conditions of the whole run (a refused key, a wrong model).
    """

    @property
    def provider(self) -> str: ...

    @property
    def model(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def input_fit(self) -> InputFit | None:
        """The model's input limit (:class:`kbsync.text.chunk.InputFit`), or None."""

    def embed_passages(self, texts: Sequence[str]) -> EmbedOutcome:
        """One vector per text, in input order, with counters (:class:`EmbedOutcome`)."""

    def embed_query(self, text: str, *, kind: TextKind = TextKind.QUERY) -> list[float]:
        """The vector of one text a person waits for: a query, or (``kind=PASSAGE``) a
        search's HyDE passage, within the query's time budget."""

    def query_dimension(self) -> int:
        """:attr:`dimension` for the query side, probed within the query's time budget."""
