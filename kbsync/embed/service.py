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
  (it stops when both halves fail as an outage does, when single inputs fail too
  and nothing was embedded, and at a request budget) and
  skipped while the endpoint looks down (fail-fast, below);
* a permanent error (401, 404, malformed reply) raises at once: retrying or
  storing fallbacks would hide a configuration mistake;
* a search query is interactive: with ``query_budget_s`` its attempts (and an
  endpoint's dimension probe) share one budget, each request timing out with what
  is left of it, and a spent budget is one error naming the endpoint.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Sequence, TypeVar

from kbsync.embed.base import BatchResult, EmbeddingProvider, TextKind
from kbsync.embed.bisect import bisect_batch, bisect_budget
from kbsync.embed.cache import EmbeddingCache, cache_key, pack_vector, unpack_vector
from kbsync.embed.query_budget import attempts_within
from kbsync.errors import BatchTooLarge, EmbeddingPermanentError, EmbeddingTransientError, InputRejected
from kbsync.retrying import FullJitterAtLeastRetryAfter, call_with_retries

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass
class _Bisected:
    """A failed batch after bisection: vectors in input order, None where an input kept
    failing; ``requests`` is what bisecting cost."""

    vectors: list[list[float] | None]
    truncated: int
    requests: int


@dataclass
class EmbedOutcome:
    """Vectors for one :meth:`EmbeddingService.embed_passages` call.

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


@dataclass
class ServiceStats:
    """Counters over a service's life (all calls, all threads)."""

    computed: int = 0
    cached: int = 0
    failed: int = 0
    truncated: int = 0
    retries: int = 0
    splits: int = 0
    bisect_requests: int = 0


class EmbeddingService:
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

    def input_fit(self):
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

    def embed_query(self, text: str) -> list[float]:
        """Embed one search query (with the model's query prefix, if any).

        Raises:
            EmbeddingTransientError: attempts exhausted (no fallback for queries), or
                ``query_budget_s`` spent (the message names the endpoint and the budget).
            EmbeddingPermanentError: as for :meth:`embed_passages`.
        """
        deadline = None if self.query_budget_s is None else time.monotonic() + self.query_budget_s
        if self._dimension is None:
            self._dimension = self._query_attempts(lambda: int(self._provider.dimension), deadline)
        dim = self._dimension
        key = cache_key(self.provider, self.model, dim, TextKind.QUERY, text)
        if self._cache is not None:
            hit = self._cache.get(key)
            if hit is not None and self._valid(hit, dim):
                return hit
        result = self._query_attempts(lambda: self._call([text], TextKind.QUERY, dim), deadline)
        vector = result.vectors[0]
        if self._cache is not None:
            self._cache.set(key, vector)
        return vector

    def close(self) -> None:
        """Release the cache's handles."""
        if self._cache is not None:
            self._cache.close()

    # -- internals -------------------------------------------------------------------
    def _compute(
        self, texts: list[str], kind: TextKind, dim: int, keys: dict[str, str]
    ) -> tuple[dict[str, list[float]], int, int, int]:
        """Embed ``texts`` in batches; returns vectors of the successes, truncations, retries
        and bisection requests."""
        done: dict[str, list[float]] = {}
        truncated = bisected = 0
        retries = [0]
        pending: deque[tuple[int, int]] = deque([(0, len(texts))]) if texts else deque()
        while pending:
            start, end = pending.popleft()
            size = self.batch_size
            if end - start > size:
                pending.extendleft(reversed([(s, min(s + size, end)) for s in range(start, end, size)]))
                continue
            batch = texts[start:end]
            result: BatchResult | _Bisected | None
            try:
                result = self._attempt_batch(batch, kind, dim, retries)
            except BatchTooLarge as exc:
                if len(batch) == 1:
                    raise EmbeddingPermanentError(f"the endpoint refuses even one input: {exc}") from exc
                self._shrink((len(batch) + 1) // 2)
                pending.appendleft((start, end))
                continue
            except InputRejected as exc:
                result = self._bisect(batch, kind, dim, exc)
            else:
                if result is None and not self._failing_fast():
                    result = self._bisect(batch, kind, dim, None)
            if result is None:
                continue
            truncated += result.truncated
            bisected += result.requests
            fresh = {t: v for t, v in zip(batch, result.vectors) if v is not None}
            if self._cache is not None:
                self._cache.set_many((keys[t], v) for t, v in fresh.items())
            done.update(fresh)
        return done, truncated, retries[0], bisected

    def _failing_fast(self) -> bool:
        """True while consecutive batches keep failing (the endpoint looks down)."""
        with self._lock:
            return self.fail_fast_after > 0 and self._consecutive_failures >= self.fail_fast_after

    def _bisect(self, batch: list[str], kind: TextKind, dim: int,
                rejected: InputRejected | None) -> _Bisected:
        """Vectors of the inputs of a failed batch that embed alone or in smaller groups;
        None where an input keeps failing. ``requests`` counts what it cost.

        Raises:
            InputRejected: a single rejected input before the endpoint accepted
                anything, or a rejection bisection blames on the configuration.
        """
        if len(batch) == 1:  # nothing to split: the input itself failed
            if rejected is not None and not self._accepted:
                raise rejected
            return _Bisected([None], 0, 0)

        def once(texts: list[str]) -> BatchResult:
            result = self._call(texts, kind, dim)
            with self._lock:
                self._consecutive_failures = 0
            return result

        found = bisect_batch(batch, once, budget=bisect_budget(len(batch)), accepted=lambda: self._accepted)
        log.warning("embedding: a batch of %d failed (%s); bisected in %d request(s): %d input(s) "
                    "fall back, %d embedded%s", len(batch), rejected or "attempts exhausted",
                    found.requests, len(found.fallback), len(found.vectors),
                    f"; stopped: {found.stopped}" if found.stopped else "")
        return _Bisected([found.vectors.get(i) for i in range(len(batch))], found.truncated,
                         found.requests)

    def _attempt_batch(self, batch: list[str], kind: TextKind, dim: int, retries: list[int]) -> BatchResult | None:
        """One batch with retries; None when its attempts are exhausted."""
        with self._lock:
            fast = self.fail_fast_after > 0 and self._consecutive_failures >= self.fail_fast_after
        attempts = 1 if fast else self.max_attempts
        try:
            result = self._retrying(lambda: self._call(batch, kind, dim), attempts, retries)
        except EmbeddingTransientError as exc:
            with self._lock:
                self._consecutive_failures += 1
                opened = self._consecutive_failures == self.fail_fast_after
            log.warning("embedding batch of %d failed after %d attempt(s): %s", len(batch), attempts, exc)
            if opened:
                log.warning("embedding: %d consecutive batches failed; one attempt per batch until one succeeds",
                            self.fail_fast_after)
            return None
        with self._lock:
            self._consecutive_failures = 0
        return result

    def _query_attempts(self, fn: Callable[[], T], deadline: float | None) -> T:
        """``fn`` retried as a batch is; within ``deadline`` (monotonic) when the service has
        a query budget (:mod:`kbsync.embed.query_budget`)."""
        if deadline is None or self.query_budget_s is None:
            return self._retrying(fn, self.max_attempts, [0])
        endpoint = getattr(self._provider, "endpoint", None)
        return attempts_within(
            fn, budget_s=self.query_budget_s, deadline=deadline, attempts=self.max_attempts,
            wait=FullJitterAtLeastRetryAfter(
                base_s=self.backoff_base_s, max_s=self.backoff_max_s,
                retry_after_max_s=self.retry_after_max_s, uniform=self._uniform),
            sleep=self._sleep, timeout=getattr(self._provider, "request_timeout", None),
            where=f"embedding endpoint {endpoint}" if endpoint else f"embedding provider {self.provider}")

    def _retrying(self, fn: Callable[[], T], attempts: int, retries: list[int]) -> T:
        """Call ``fn``; retry EmbeddingTransientError up to ``attempts`` calls in all
        (:func:`kbsync.retrying.call_with_retries`), counting retries in ``retries[0]``."""

        def on_retry(exc: BaseException, attempt: int, delay: float) -> None:
            retries[0] += 1
            log.info("embedding: transient error (attempt %d/%d), retrying in %.2fs: %s",
                     attempt, attempts, delay, exc)

        wait = FullJitterAtLeastRetryAfter(
            base_s=self.backoff_base_s, max_s=self.backoff_max_s,
            retry_after_max_s=self.retry_after_max_s, uniform=self._uniform)
        return call_with_retries(fn, retry_on=EmbeddingTransientError, attempts=attempts,
                                 wait=wait, sleep=self._sleep, on_retry=on_retry)

    def _uniform(self, low: float, high: float) -> float:
        """A jitter draw from the service's source (shared by threads, so locked)."""
        with self._lock:
            return self._rng.uniform(low, high)

    def _shrink(self, size: int) -> None:
        with self._lock:
            if size < self._batch_size:
                log.warning("embedding: endpoint refused a batch; batch size %d -> %d for the rest of this run",
                            self._batch_size, size)
                self._batch_size = size
            self.stats.splits += 1

    def _call(self, batch: list[str], kind: TextKind, dim: int) -> BatchResult:
        """One provider call, its result checked and rounded to float32."""
        counted = getattr(self._provider, "embed_batch_counted", None)
        if callable(counted):
            result = counted(batch, kind)
        else:
            result = BatchResult(self._provider.embed_batch(batch, kind), 0)
        if len(result.vectors) != len(batch):
            raise EmbeddingPermanentError(
                f"{self.provider}/{self.model} returned {len(result.vectors)} vectors for {len(batch)} texts"
            )
        rounded: list[list[float]] = []
        for vector in result.vectors:
            # float32 rounding makes a computed vector identical to its cached copy.
            vector = unpack_vector(pack_vector(vector))
            if len(vector) != dim:
                raise EmbeddingPermanentError(
                    f"{self.provider}/{self.model} returned dimension {len(vector)}, expected {dim}"
                )
            if not self._valid(vector, dim):
                raise EmbeddingPermanentError(
                    f"{self.provider}/{self.model} returned a non-finite or all-zero vector"
                )
            rounded.append(vector)
        self._accepted = True
        return BatchResult(rounded, result.truncated)

    @staticmethod
    def _valid(vector: Sequence[float], dim: int) -> bool:
        """Right length, finite, not all zeros."""
        # One sum finds any NaN or inf (they propagate) at C speed; float32
        # values cannot overflow a float64 sum.
        return len(vector) == dim and math.isfinite(sum(vector)) and any(vector)

    def __repr__(self) -> str:
        return f"EmbeddingService(provider={self.provider!r}, model={self.model!r}, batch_size={self.batch_size})"
