"""One budget for an interactive query's embedding, all attempts together.

A batch of an ingest may wait minutes for an endpoint (``max_attempts`` attempts of
``KBSYNC_EMBED_TIMEOUT_S`` each: 5 x 60 s); a search must not: a person is waiting,
and the old wait printed nothing for 308 s. :func:`attempts_within` retries as a
batch does, but each request times out with what is left of the budget
(``KBSYNC_QUERY_TIMEOUT_S``), no backoff runs past it, and a spent budget is one
error that names the endpoint (never its key: the provider's ``endpoint`` has none).

The chat calls of a search's expansions (MQE, HyDE; :mod:`kbsync.query.search`) share one
such budget too, through the same function with the chat model's error kind
(``retry_on``): a chat endpoint that never answers costs the budget, not
``KBSYNC_LLM_MAX_ATTEMPTS`` x ``KBSYNC_LLM_TIMEOUT_S`` per expansion (issue 37: 123 s).
"""

from __future__ import annotations

import time
from typing import Callable, ContextManager, TypeVar

from kbsync.errors import EmbeddingTransientError, TransientError
from kbsync.retrying import FullJitterAtLeastRetryAfter, call_with_retries

T = TypeVar("T")

# A request cut to the deadline times out a hair before it: this close counts as spent.
_SLACK_S = 0.05


class _BudgetSpent(Exception):
    """The budget ran out before the next attempt (never leaves this module)."""


def attempts_within(
    fn: Callable[[], T], *, budget_s: float, attempts: int, wait: FullJitterAtLeastRetryAfter,
    sleep: Callable[[float], None], where: str,
    timeout: Callable[[float], ContextManager[None]] | None,
    deadline: float | None = None,
    retry_on: type[TransientError] = EmbeddingTransientError,
) -> T:
    """``fn()``, retried on ``retry_on`` (:class:`EmbeddingTransientError` unless told) up
    to ``attempts`` calls, all within ``budget_s`` seconds (from ``deadline``, monotonic,
    when given: several calls may share one budget).

    Args:
        timeout: the provider's ``request_timeout(seconds)`` context, so each request
            waits at most what is left; None for providers without network requests.
        where: the endpoint as the error names it (``embedding endpoint URL``).
        retry_on: the transient kind retried, and the kind a spent budget raises.

    Raises:
        retry_on: every attempt failed before the budget was spent (the last error,
            unchanged), or the budget was spent (naming ``where``, the budget and
            ``KBSYNC_QUERY_TIMEOUT_S``), also when it was spent before the first attempt.
        BaseException: anything else ``fn`` raised, at once.
    """
    deadline = time.monotonic() + budget_s if deadline is None else deadline
    tries = [0]

    def bounded() -> T:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _BudgetSpent()
        tries[0] += 1
        if timeout is None:
            return fn()
        with timeout(left):
            return fn()

    def bounded_sleep(seconds: float) -> None:
        sleep(max(0.0, min(seconds, deadline - time.monotonic())))

    try:
        return call_with_retries(bounded, retry_on=retry_on, attempts=attempts,
                                 wait=wait, sleep=bounded_sleep,
                                 on_retry=lambda exc, attempt, delay: None)
    except (retry_on, _BudgetSpent) as exc:
        if isinstance(exc, retry_on) and time.monotonic() < deadline - _SLACK_S:
            raise
        raise retry_on(
            f"{where} did not answer the query within {budget_s:g} s ({tries[0]} attempt(s)); "
            "is it up? (KBSYNC_QUERY_TIMEOUT_S sets this budget)"
        ) from (None if isinstance(exc, _BudgetSpent) else exc)
