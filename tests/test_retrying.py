"""kbsync.retrying: the retry policy on tenacity keeps the hand-written loop's behaviour."""

from __future__ import annotations

import random

import pytest

from kbsync.errors import EmbeddingPermanentError, EmbeddingTransientError, LLMTransientError
from kbsync.retrying import FullJitterAtLeastRetryAfter, call_with_retries


def _failing(errors: list[BaseException], result: str = "ok"):
    calls = []

    def fn() -> str:
        calls.append(1)
        if errors:
            raise errors.pop(0)
        return result
    return fn, calls


def _run(fn, *, attempts=5, rng=None, retry_after_max_s=60.0, retry_on=EmbeddingTransientError):
    waits: list[float] = []
    retried: list[tuple[str, int, float]] = []
    wait = FullJitterAtLeastRetryAfter(base_s=0.5, max_s=3.0, retry_after_max_s=retry_after_max_s,
                                       uniform=(rng or random.Random(0)).uniform)
    out = call_with_retries(fn, retry_on=retry_on, attempts=attempts, wait=wait, sleep=waits.append,
                            on_retry=lambda exc, n, delay: retried.append((str(exc), n, delay)))
    return out, waits, retried


def test_waits_are_the_old_loops_draws_and_stop_after_success() -> None:
    fn, calls = _failing([EmbeddingTransientError("a"), EmbeddingTransientError("b")])
    out, waits, retried = _run(fn, rng=random.Random(7))
    rng = random.Random(7)  # the old loop: uniform(0, min(3, 0.5 * 2 ** (n - 1))) per retry
    assert out == "ok" and len(calls) == 3
    assert waits == [rng.uniform(0.0, 0.5), rng.uniform(0.0, 1.0)]
    assert retried == [("a", 1, waits[0]), ("b", 2, waits[1])]


def test_retry_after_is_a_floor_with_a_ceiling() -> None:
    fn, _ = _failing([EmbeddingTransientError("slow", retry_after=1000.0),
                      EmbeddingTransientError("slow", retry_after=2.0)])
    _, waits, _ = _run(fn, retry_after_max_s=60.0)
    assert waits == [60.0, 2.0]


def test_the_last_exception_itself_is_raised_and_nothing_drawn_after_it() -> None:
    last = EmbeddingTransientError("third")
    fn, calls = _failing([EmbeddingTransientError("1"), EmbeddingTransientError("2"), last])
    draws: list[tuple[float, float]] = []
    rng = random.Random(0)

    def uniform(low: float, high: float) -> float:
        draws.append((low, high))
        return rng.uniform(low, high)

    wait = FullJitterAtLeastRetryAfter(base_s=0.5, max_s=3.0, retry_after_max_s=60.0, uniform=uniform)
    with pytest.raises(EmbeddingTransientError) as info:
        call_with_retries(fn, retry_on=EmbeddingTransientError, attempts=3, wait=wait,
                          sleep=lambda s: None, on_retry=lambda *a: None)
    assert info.value is last and len(calls) == 3
    assert draws == [(0.0, 0.5), (0.0, 1.0)]  # one draw per wait taken, none after the last


@pytest.mark.parametrize("error", [EmbeddingPermanentError("401"), LLMTransientError("other kind"),
                                   KeyboardInterrupt()])
def test_anything_else_propagates_from_the_first_attempt(error) -> None:
    fn, calls = _failing([error])
    with pytest.raises(type(error)):
        _run(fn)
    assert len(calls) == 1


def test_one_attempt_never_waits() -> None:
    fn, calls = _failing([EmbeddingTransientError("down")])
    with pytest.raises(EmbeddingTransientError):
        _run(fn, attempts=1)
    assert len(calls) == 1


def test_a_call_that_succeeds_at_once_does_not_import_tenacity() -> None:
    """tenacity (and tornado, when installed) is imported only once an attempt fails."""
    import subprocess
    import sys

    code = ("import sys, random\n"
            "from kbsync.errors import EmbeddingTransientError\n"
            "from kbsync.retrying import FullJitterAtLeastRetryAfter, call_with_retries\n"
            "wait = FullJitterAtLeastRetryAfter(base_s=0.5, max_s=3.0, retry_after_max_s=60.0,"
            " uniform=random.Random(0).uniform)\n"
            "kw = dict(retry_on=EmbeddingTransientError, attempts=3, wait=wait, sleep=lambda s: None,"
            " on_retry=lambda *a: None)\n"
            "assert call_with_retries(lambda: 1, **kw) == 1\n"
            "print('tenacity' in sys.modules)\n"
            "failed = [EmbeddingTransientError('x')]\n"
            "def flaky():\n"
            "    if failed: raise failed.pop()\n"
            "    return 2\n"
            "assert call_with_retries(flaky, **kw) == 2\n"
            "print('tenacity' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]
