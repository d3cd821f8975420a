"""How one batch gets through a provider: retries, fail-fast, the learned batch size,
bisection of a failed batch, and the checks on every vector that comes back.

:class:`BatchCalls` is the base of :class:`~kbsync.embed.service.EmbeddingService`, which
sets every attribute declared here in its ``__init__`` and documents the policy (its module
doc). Split from the service so each stays a few hundred lines; the two share one lock.

Invariants: a vector handed back has the asked dimension, is finite and not all zeros, and
is rounded to float32 (a computed vector equals its cached copy); a batch whose attempts are
exhausted is bisected unless the endpoint looks down (``fail_fast_after``), and only the
inputs that keep failing come back as None.
"""

from __future__ import annotations

import logging
import math
import random
import threading
from collections import deque
from dataclasses import dataclass
from typing import Callable, Sequence, TypeVar

from kbsync.embed.base import BatchResult, EmbeddingProvider, TextKind
from kbsync.embed.bisect import bisect_batch, bisect_budget
from kbsync.embed.cache import EmbeddingCache, pack_vector, unpack_vector
from kbsync.embed.query_budget import attempts_within
from kbsync.errors import BatchTooLarge, EmbeddingPermanentError, EmbeddingTransientError, InputRejected
from kbsync.retrying import FullJitterAtLeastRetryAfter, call_with_retries

log = logging.getLogger("kbsync.embed.service")  # one logger for the service's messages

T = TypeVar("T")


@dataclass
class _Bisected:
    """A failed batch after bisection: vectors in input order, None where an input kept
    failing; ``requests`` is what bisecting cost."""

    vectors: list[list[float] | None]
    truncated: int
    requests: int


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


class BatchCalls:
    """The provider calls of :class:`~kbsync.embed.service.EmbeddingService` (see there)."""

    _provider: EmbeddingProvider
    _cache: EmbeddingCache | None
    _batch_size: int
    _lock: threading.Lock
    _consecutive_failures: int
    _accepted: bool
    _sleep: Callable[[float], None]
    _rng: random.Random
    max_attempts: int
    backoff_base_s: float
    backoff_max_s: float
    retry_after_max_s: float
    fail_fast_after: int
    query_budget_s: float | None
    stats: ServiceStats

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
            with self._lock:
                size = self._batch_size
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
            where=f"embedding endpoint {endpoint}" if endpoint else f"embedding provider {self._provider.provider}")

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
                f"{self._provider.provider}/{self._provider.model} returned {len(result.vectors)} vectors for {len(batch)} texts"
            )
        rounded: list[list[float]] = []
        for vector in result.vectors:
            # float32 rounding makes a computed vector identical to its cached copy.
            vector = unpack_vector(pack_vector(vector))
            if len(vector) != dim:
                raise EmbeddingPermanentError(
                    f"{self._provider.provider}/{self._provider.model} returned dimension {len(vector)}, expected {dim}"
                )
            if not self._valid(vector, dim):
                raise EmbeddingPermanentError(
                    f"{self._provider.provider}/{self._provider.model} returned a non-finite or all-zero vector"
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
