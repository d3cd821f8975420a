"""Bisecting a failed embedding batch down to the inputs the endpoint will not take.

A batch that fails for good (rejected with a 400/422, or every retry used up)
may fail because of one input the endpoint refuses (a poisoned text) while the
rest would be embedded. :func:`bisect_batch` splits it in halves, sends each
once, and keeps splitting the halves that fail, so only the offending inputs
fall back to flagged zero vectors.

Bounds (an outage must not turn into a request storm):

* both halves failing transiently without an answer (a timeout, no connection)
  or with an answer that says the service is unavailable (429, 502, 503, 504)
  looks like an outage, not a bad input: the range falls back whole and
  bisection stops there;
* both halves failing with another transient status (a 500: the endpoint
  answered) may be input-dependent, with bad inputs in both halves: they are
  split further, down to single inputs, whatever failed before. Failing single
  inputs alone prove nothing (a batch of three may hold two poisoned texts and
  one good one, issue 37): only a request that succeeds tells bad inputs from a
  broken endpoint, so an endpoint that answers 500 to everything is bisected
  until the budget is spent (what is left then falls back whole, and the run's
  summary sees the outage: every document failed to embed);
* both halves rejected before the endpoint ever accepted a request looks like
  a configuration error (a bad ``dimensions`` or model parameter): the
  rejection is raised, as an unbisected batch's would be;
* at most ``budget`` requests per batch; what is left then falls back whole.

With one poisoned input in a batch of ``n`` the cost is ``2 * ceil(log2(n))``
requests (12 for 64).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

from kbsync.embed.base import BatchResult
from kbsync.errors import EmbeddingTransientError, InputRejected


@dataclass
class Bisection:
    """What bisecting one failed batch gave.

    Invariant: every position of the batch is in exactly one of ``vectors`` and
    ``fallback``.
    """

    vectors: dict[int, list[float]] = field(default_factory=dict)  # by position in the batch
    fallback: list[int] = field(default_factory=list)
    truncated: int = 0
    requests: int = 0
    stopped: str = ""  # why some range fell back whole ("" when bisected to the end)


def bisect_budget(size: int) -> int:
    """Requests allowed for bisecting a batch of ``size``: enough to isolate ~2 bad inputs."""
    return 4 * max(1, math.ceil(math.log2(max(size, 2))))


# Statuses by which a server says it cannot serve anyone right now (not: "this input").
OUTAGE_STATUSES = frozenset({429, 502, 503, 504})


def _looks_down(exc: Exception) -> bool:
    """A transient failure that says nothing about the inputs: no answer, or "unavailable"."""
    status = getattr(exc, "status", None)
    return status is None or status in OUTAGE_STATUSES


def bisect_batch(
    texts: Sequence[str],
    call: Callable[[list[str]], BatchResult],
    *,
    budget: int,
    accepted: Callable[[], bool],
) -> Bisection:
    """Split the failed batch ``texts`` until the failing inputs are isolated.

    Args:
        texts: the batch that failed (at least one text).
        call: one request, no retries: texts -> their :class:`~kbsync.embed.base.BatchResult`.
        budget: most requests to spend.
        accepted: True once the endpoint has accepted any request.

    Raises:
        InputRejected: both halves were rejected and the endpoint never accepted
            anything (a configuration error, not a bad input).
        EmbeddingPermanentError: any other permanent error of a half (401, 404,
            a malformed reply), unchanged.
    """
    out = Bisection()
    pending = [(0, len(texts))]  # ranges known to fail
    while pending:
        start, end = pending.pop()
        if end - start == 1:
            out.fallback.append(start)
            continue
        if out.requests + 2 > budget:
            out.fallback.extend(range(start, end))
            out.stopped = out.stopped or (f"request budget of {budget} spent" + (
                "" if out.vectors else ", none embedded (the endpoint looks down)"))
            continue
        mid = (start + end) // 2
        failed: list[tuple[int, int, Exception]] = []
        for a, b in ((start, mid), (mid, end)):
            out.requests += 1
            try:
                result = call(list(texts[a:b]))
            except (EmbeddingTransientError, InputRejected) as exc:
                failed.append((a, b, exc))
                continue
            out.vectors.update(zip(range(a, b), result.vectors))
            out.truncated += result.truncated
        transient = [e for *_, e in failed if isinstance(e, EmbeddingTransientError)]
        if len(transient) == 2 and any(_looks_down(e) for e in transient):
            # Down (no answer, or "unavailable"): stop here, every range still pending
            # falls back whole. An answered 500 in both halves splits on (module doc).
            for a, b in [(start, end), *pending]:
                out.fallback.extend(range(a, b))
            pending.clear()
            out.stopped = "both halves failed transiently (the endpoint looks down)"
            continue
        if len(failed) == 2 and not accepted() and all(isinstance(e, InputRejected) for *_, e in failed):
            raise failed[0][2]
        pending.extend((a, b) for a, b, _ in reversed(failed))
    out.fallback.sort()
    return out
