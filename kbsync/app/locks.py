"""The front doors' one lock decision (the rule: :mod:`kbsync.catalog.lock`).

The CLI commands and the Python API call :func:`write_locks` once per command or
knowledge base and hand the :class:`~kbsync.catalog.lock.WriteLocks` it returns to every
writer below them; nothing below decides again. The flows decide by the same rule in
:func:`tasks.locking.flow_locks` (always: a flow has a Prefect API).

Prefect's limit is injected lazily (:func:`prefect_lock`): Prefect's import costs seconds,
and is paid only when a lock is really taken against a server store.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager

from kbsync.catalog.lock import WriteLocks
from kbsync.settings import Settings


def distributed_in_use(settings: Settings) -> bool:
    """The rule: a server store (``KBSYNC_QDRANT_URL``) written under a Prefect API
    (``PREFECT_API_URL``, from the environment).

    Not a server store alone: without a named API Prefect would start its temporary local
    server (10-30 s) to keep a limit in this machine's own database, which excludes no
    writer the lock file does not already exclude. Not an API alone: on the embedded engine
    the lock file is the whole rule (one machine)."""
    return bool(settings.qdrant_url and os.environ.get("PREFECT_API_URL"))


def write_locks(settings: Settings) -> WriteLocks:
    """The door's decision for ``settings``: Prefect's limit injected when the rule says so,
    else the lock file alone."""
    return WriteLocks(settings, distributed=prefect_lock if distributed_in_use(settings)
                      else None)


def prefect_lock(settings: Settings, namespace: str, *,
                 purpose: str) -> AbstractContextManager[None]:
    """:func:`tasks.locking.prefect_limit`, imported when first taken (a
    :class:`~kbsync.catalog.lock.DistributedLock`)."""
    from tasks.locking import prefect_limit  # late: Prefect's import costs seconds

    return prefect_limit(settings, namespace, purpose=purpose)
