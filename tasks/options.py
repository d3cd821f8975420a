"""The ``@task`` options every kbsync task shares, typed as Prefect's decorator takes them."""

from __future__ import annotations

from typing import Any, TypedDict

from prefect.cache_policies import NONE, CachePolicy

from kbsync.errors import TransientError


class TaskOptions(TypedDict):
    """Keyword arguments of ``@task``: spread with ``**``, they are checked against it."""

    cache_policy: CachePolicy
    persist_result: bool


COMMON: TaskOptions = {"cache_policy": NONE, "persist_result": False}
"""No cache (inputs are live values, not hashable keys) and no result persistence (results
are handed on in memory)."""


def transient(task: Any, task_run: Any, state: Any) -> bool:
    """``retry_condition_fn`` of every retried task: retry only when retrying can help.

    A :class:`kbsync.errors.TransientError` (store unavailable, an embedding endpoint's
    hiccup) is retried; anything else is permanent for the task's inputs and fails at once.
    """
    try:
        state.result()
    except TransientError:
        return True
    except Exception:  # noqa: BLE001 - anything else is permanent
        return False
    return False
