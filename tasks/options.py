"""The ``@task`` options every kbsync task shares, typed as Prefect's decorator takes them."""

from __future__ import annotations

from typing import TypedDict

from prefect.cache_policies import NONE, CachePolicy


class TaskOptions(TypedDict):
    """Keyword arguments of ``@task``: spread with ``**``, they are checked against it."""

    cache_policy: CachePolicy
    persist_result: bool


COMMON: TaskOptions = {"cache_policy": NONE, "persist_result": False}
"""No cache (inputs are live values, not hashable keys) and no result persistence (results
are handed on in memory)."""
