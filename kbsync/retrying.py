"""Bounded retries of transient errors, on ``tenacity``: the embedding and chat clients' policy.

The policy, the same for every caller:

* only the given :class:`~kbsync.errors.TransientError` kind is retried; any
  other exception propagates at once, from the first attempt;
* at most ``attempts`` calls in all; when they are used up, the last
  exception itself is raised (never tenacity's ``RetryError``);
* the wait before attempt ``n + 1`` is full-jitter exponential backoff,
  ``uniform(0, min(max_s, base_s * 2 ** (n - 1)))``, but at least the server's
  ``retry_after`` (the exception's field) capped at ``retry_after_max_s``;
* ``on_retry(exc, attempt, delay)`` runs before each wait (callers log and count there).

tenacity runs the loop (stop, retry predicate, before-sleep hook, injectable
sleep, re-raise). The wait is ours: tenacity's ``wait_random_exponential``
draws from the global ``random`` (callers inject a seeded, locked source), and
its ``wait_combine`` adds waits where Retry-After must be a floor.

tenacity is imported when a first attempt fails, not with this module nor for a call that
succeeds at once: its import pulls in tornado when installed (Dask's), ~30-70 ms that every
search's ``import kbsync.api``, and then every no-op sync's embedder check, paid.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from kbsync.errors import TransientError

if TYPE_CHECKING:
    import tenacity

T = TypeVar("T")


class FullJitterAtLeastRetryAfter:
    """Full-jitter exponential backoff, floored by the exception's ``retry_after``: a wait
    for tenacity (any callable of the retry state is one).

    Args:
        base_s: ceiling of the first wait; doubles per attempt.
        max_s: largest ceiling of the backoff.
        retry_after_max_s: longest server-requested wait honoured.
        uniform: ``(low, high) -> float``, the jitter source (``random.uniform`` by default).
    """

    def __init__(self, *, base_s: float, max_s: float, retry_after_max_s: float,
                 uniform: Callable[[float, float], float] = random.uniform) -> None:
        self._base_s, self._max_s = base_s, max_s
        self._retry_after_max_s = retry_after_max_s
        self._uniform = uniform

    def __call__(self, retry_state: "tenacity.RetryCallState") -> float:
        """Seconds to wait after the attempt ``retry_state`` just failed."""
        backoff = self._uniform(0.0, self._ceiling(retry_state.attempt_number))
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        retry_after = getattr(exc, "retry_after", None) or 0.0
        return max(backoff, min(float(retry_after), self._retry_after_max_s))

    def _ceiling(self, attempt: int) -> float:
        """``min(max_s, base_s * 2 ** (attempt - 1))``, as tenacity's ``wait_exponential``."""
        try:
            return max(0.0, min(self._max_s, self._base_s * 2 ** (attempt - 1)))
        except OverflowError:
            return self._max_s


def call_with_retries(
    fn: Callable[[], T], *, retry_on: type[TransientError], attempts: int,
    wait: FullJitterAtLeastRetryAfter, sleep: Callable[[float], None],
    on_retry: Callable[[BaseException, int, float], None],
) -> T:
    """``fn()``, retried on ``retry_on`` as the module doc says.

    Raises:
        retry_on: every one of ``attempts`` calls failed with it (the last one is raised).
        BaseException: whatever else ``fn`` raised, at once.
    """
    try:
        return fn()
    except retry_on as exc:
        first_failure = exc
    # tenacity only once an attempt has failed: most calls succeed at once, and its import
    # (~70 ms: tornado when installed) was most of a no-op sync's embedder check. It replays
    # the first attempt's failure, so its attempts, waits and hooks are as if it ran them all.
    import tenacity

    replayed = False

    def attempt() -> T:
        nonlocal replayed
        if not replayed:
            replayed = True
            raise first_failure
        return fn()

    def before_sleep(state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        assert exc is not None  # tenacity sleeps only after a failed attempt
        on_retry(exc, state.attempt_number, state.upcoming_sleep)

    def wait_unless_last(state: tenacity.RetryCallState) -> float:
        # tenacity asks for the wait before it checks stop: after the last attempt
        # nothing is drawn, so a seeded jitter source sees only the waits taken.
        return 0.0 if state.attempt_number >= attempts else wait(state)

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(attempts), wait=wait_unless_last,
        retry=tenacity.retry_if_exception_type(retry_on), before_sleep=before_sleep,
        sleep=sleep, reraise=True)
    return retrying(attempt)
