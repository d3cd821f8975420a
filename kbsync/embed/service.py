"""The embedding stage: cache, batching, retries, batch splitting and fallback.

:class:`EmbeddingService` is what the rest of kbsync calls. It wraps any
:class:`~kbsync.embed.base.EmbeddingProvider` and gives every provider the same
behaviour:

* cache first (a text repeated within one call is computed once);
* misses go out in batches of ``batch_size``; a :class:`BatchTooLarge` answer
  halves the batch and the smaller size is kept for the service's life;
* transient errors are retried with exponential backoff and full jitter,
  waiting at least the server's ``Retry-After``, at most ``max_attempts`` times
  (:mod:`kbsync.retrying`, on tenacity);
* a batch that fails for good (attempts exhausted, or its inputs rejected with
  a 400/422) is bisected (:mod:`kbsync.embed.bisect`) down to the inputs that
  fail; only those get zero vectors and ``failed`` flags (never cached), so the
  caller stores them flagged and re-embeds them next run. Bisection is bounded
  (it stops when both halves fail as an outage does, and at a request budget;
  answered 500s in both halves split on, since only a success tells a poisoned
  input from a broken endpoint) and
  skipped while the endpoint looks down (fail-fast, below);
* a permanent error (401, 404, malformed reply) raises at once: retrying or
  storing fallbacks would hide a configuration mistake;
* a search query is interactive: with ``query_budget_s`` its attempts (and an
  endpoint's dimension probe) share one budget, each request timing out with what
  is left of it, and a spent budget is one error naming the endpoint.

This module keeps what the service promises (the cache, repeated texts, the outcome and the
counters); how one batch gets through the provider (retries, fail-fast, the learned batch
size, bisection, the checks on what comes back) is :mod:`kbsync.embed.batch_calls`.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import TYPE_CHECKING, Callable, Sequence

from kbsync.embed.base import EmbeddingProvider, EmbedOutcome, TextKind
from kbsync.embed.batch_calls import BatchCalls, ServiceStats
from kbsync.embed.cache import EmbeddingCache, cache_key

if TYPE_CHECKING:  # the type only
    from kbsync.text.chunk import InputFit

log = logging.getLogger(__name__)

__all__ = ["EmbedOutcome", "EmbeddingService", "ServiceStats"]


class EmbeddingService(BatchCalls):
    """Embeds passages and queries through a provider, a cache and a retry policy.

    Thread-safe: several threads may call it at once (counters and the learned
    batch size are guarded; the cache is safe across threads and processes).

    Args:
        provider: any :class:`EmbeddingProvider`.
        cache: vector cache, or None to disable caching.
        batch_size: texts per provider call (lowered automatically on BatchTooLarge).
        max_attempts: calls per batch before its zero-vector fallback, at least 1.
        backoff_base_s: first backoff ceiling; doubles per attempt (full jitter).
        backoff_max_s: backoff ceiling.
        retry_after_max_s: longest server-requested wait honoured.
        fail_fast_after: after this many consecutive batches exhausted their
            attempts (the endpoint looks down), each further batch gets one
            attempt until one succeeds; logged when it switches. 0 disables.
        query_budget_s: seconds one :meth:`embed_query` may take, all attempts
            together; None = ``max_attempts`` attempts of the provider's timeout.
        sleep: the wait function (tests inject a recorder).
        rng: jitter source (tests inject a seeded one).
    """

    def __init__(
        self,
        provider: EmbeddingProvider,
        *,
        cache: EmbeddingCache | None,
        batch_size: int = 64,
        max_attempts: int = 5,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 30.0,
        retry_after_max_s: float = 300.0,
        fail_fast_after: int = 2,
        query_budget_s: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if batch_size < 1 or max_attempts < 1:
            raise ValueError("batch_size and max_attempts must be >= 1")
        self._provider = provider
        self._cache = cache
        self._batch_size = batch_size
        self.max_attempts = max_attempts
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.retry_after_max_s = retry_after_max_s
        self.fail_fast_after = fail_fast_after
        self.query_budget_s = query_budget_s
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._dimension: int | None = None
        self._consecutive_failures = 0
        self._accepted = False  # the provider has answered a request (bisection's evidence)
        self.stats = ServiceStats()

    # -- identity ----------------------------------------------------------------
    @property
    def provider(self) -> str:
        """Provider name (``local`` | ``hash`` | ``openai``)."""
        return self._provider.provider

    @property
    def model(self) -> str:
        """Model id in effect."""
        return self._provider.model

    @property
    def dimension(self) -> int:
        """Vector length. For an openai provider without configured dimensions the
        first read may probe the endpoint (retried like a batch).

        Raises:
            EmbeddingTransientError: the probe kept failing.
            EmbeddingPermanentError: the probe was refused.
        """
        if self._dimension is None:
            self._dimension = self._retrying(lambda: int(self._provider.dimension), self.max_attempts, [0])
        return self._dimension

    def query_dimension(self) -> int:
        """:attr:`dimension` for the query side: a probe of the endpoint runs within the
        query budget (``query_budget_s``), not a batch's 5 x 60 s, since a person waits.

        Raises:
            EmbeddingTransientError: the budget was spent (the message names the endpoint).
        """
        if self._dimension is None:
            deadline = None if self.query_budget_s is None else time.monotonic() + self.query_budget_s
            self._dimension = self._query_attempts(lambda: int(self._provider.dimension), deadline)
        return self._dimension

    @property
    def batch_size(self) -> int:
        """Current texts per call (may have shrunk after BatchTooLarge)."""
        with self._lock:
            return self._batch_size

    @property
    def cache(self) -> EmbeddingCache | None:
        """The vector cache, if any."""
        return self._cache

    def input_fit(self) -> InputFit | None:
        """The provider's input limit for the chunker (:class:`kbsync.text.chunk.InputFit`), or
        None when it has none worth fitting (windowing models, API models, hash)."""
        fit = getattr(self._provider, "input_fit", None)
        return fit() if callable(fit) else None

    # -- public API ----------------------------------------------------------------
    def embed_passages(self, texts: Sequence[str]) -> EmbedOutcome:
        """Embed document chunks; failures of a batch become flagged zero vectors.

        Returns:
            An :class:`EmbedOutcome` (see its invariants). Inspect
            ``all_failed``: the endpoint being down is reported, not raised.

        Raises:
            EmbeddingPermanentError: the provider refused the request for a reason
                retrying cannot fix (auth, unknown model, malformed reply, a single
                input too large). Batches finished before it are already cached.
            EmbeddingTransientError: only while the dimension is still unknown
                (openai without ``KBSYNC_EMBED_DIMENSIONS``) and its probe keeps
                failing: without a dimension there is no zero vector to fall back to.
        """
        if not texts:
            return EmbedOutcome([], [])
        dim = self.dimension
        kind = TextKind.PASSAGE
        positions: dict[str, list[int]] = {}
        for i, text in enumerate(texts):
            positions.setdefault(text, []).append(i)
        unique = list(positions)
        keys = {text: cache_key(self.provider, self.model, dim, kind, text) for text in unique}
        vectors: dict[str, list[float]] = {}
        if self._cache is not None:
            for text, hit in zip(unique, self._cache.get_many([keys[t] for t in unique])):
                if hit is not None and self._valid(hit, dim):
                    vectors[text] = hit
        cached_texts = set(vectors)
        misses = [text for text in unique if text not in cached_texts]

        computed, truncated, retries, bisected = self._compute(misses, kind, dim, keys)
        vectors.update(computed)

        outcome = EmbedOutcome(vectors=[], failed=[], truncated=truncated, retries=retries,
                               bisect_requests=bisected)
        zero = [0.0] * dim
        for text in texts:
            vector = vectors.get(text)
            outcome.vectors.append(vector if vector is not None else list(zero))
            outcome.failed.append(vector is None)
            if vector is None:
                outcome.failed_count += 1
            elif text in cached_texts:
                outcome.cached += 1
            else:
                outcome.computed += 1
        with self._lock:
            self.stats.computed += outcome.computed
            self.stats.cached += outcome.cached
            self.stats.failed += outcome.failed_count
            self.stats.truncated += truncated
            self.stats.retries += retries
            self.stats.bisect_requests += bisected
        if outcome.failed_count:
            log.warning("embedding %s/%s: %d of %d texts fell back to zero vectors (%s)",
                        self.provider, self.model, outcome.failed_count, len(texts),
                        "all failed" if outcome.all_failed else "partial")
        return outcome

    def embed_query(self, text: str, *, kind: TextKind = TextKind.QUERY) -> list[float]:
        """Embed one search query (with the model's query prefix, if any), or with
        ``kind=PASSAGE`` one passage a search waits for (HyDE's), within the same budget.

        Raises:
            EmbeddingTransientError: attempts exhausted (no fallback for queries), or
                ``query_budget_s`` spent (the message names the endpoint and the budget).
            EmbeddingPermanentError: as for :meth:`embed_passages`.
        """
        deadline = None if self.query_budget_s is None else time.monotonic() + self.query_budget_s
        if self._dimension is None:
            self._dimension = self._query_attempts(lambda: int(self._provider.dimension), deadline)
        dim = self._dimension
        key = cache_key(self.provider, self.model, dim, kind, text)
        if self._cache is not None:
            hit = self._cache.get(key)
            if hit is not None and self._valid(hit, dim):
                return hit
        result = self._query_attempts(lambda: self._call([text], kind, dim), deadline)
        vector = result.vectors[0]
        if self._cache is not None:
            self._cache.set(key, vector)
        return vector

    def close(self) -> None:
        """Release the cache's handles."""
        if self._cache is not None:
            self._cache.close()

    def __repr__(self) -> str:
        return f"EmbeddingService(provider={self.provider!r}, model={self.model!r}, batch_size={self.batch_size})"
