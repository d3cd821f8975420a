"""The distributed half of the one lock policy (:mod:`kbsync.catalog.lock`): Prefect's.

:func:`prefect_limit` is a Prefect global concurrency limit of 1 per (logical collection,
namespace), created on first use, so writers on different machines queue behind each
other; :func:`kbsync.catalog.lock.ingest_lock` takes it, against a Qdrant server only,
before its lock file. :func:`run_lock` is that policy with this lock injected, as the
flows, the CLI and whoever holds a Prefect API take it.
"""

from __future__ import annotations

import logging
import re
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Iterator

from prefect import get_run_logger
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.concurrency.sync import concurrency
from prefect.exceptions import MissingContextError, ObjectNotFound

from kbsync.errors import LockHeld
from kbsync.catalog.lock import WriteLocks
from kbsync.settings import Settings


REFUSE_WITHIN_S = 5.0
"""How long a run with ``KBSYNC_LOCK_TIMEOUT_S=0`` tries for a free concurrency slot."""


def limit_name(settings: Settings, namespace: str) -> str:
    """Name of the global concurrency limit guarding one collection and namespace."""
    slug = re.sub(r"[^a-z0-9-]+", "-", f"{settings.logical_collection}-{namespace}".lower())
    return f"kbsync-write-{slug}"[:100]


def _ensure_limit(name: str) -> None:
    with get_client(sync_client=True) as client:
        try:
            client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name,
                                                                                limit=1))


def _logger():
    try:
        return get_run_logger()
    except MissingContextError:  # e.g. `kbsync remove`, which runs outside any flow
        return logging.getLogger(__name__)


@contextmanager
def prefect_limit(settings: Settings, namespace: str, *, purpose: str = "ingest"
                  ) -> Iterator[None]:
    """Hold the global concurrency limit of ``settings``' collection and ``namespace``
    (a :class:`kbsync.catalog.lock.DistributedLock`; ``purpose`` is the policy's, unused here).

    Raises:
        LockHeld: another writer holds it past ``settings.lock_timeout_s`` (0: about
            :data:`REFUSE_WITHIN_S`, the acquisition's round trips).
    """
    name = limit_name(settings, namespace)
    _ensure_limit(name)
    _logger().info("acquiring global concurrency limit %s", name)
    # 0 means "refuse at once": Prefect reads a None timeout as "wait forever", so
    # allow just the acquisition's round trips.
    waited = settings.lock_timeout_s or REFUSE_WITHIN_S
    with ExitStack() as stack:
        try:
            stack.enter_context(concurrency(name, occupy=1, strict=True, timeout_seconds=waited))
        except TimeoutError as exc:
            raise LockHeld(f"another ingest or remove of collection {settings.collection!r}, "
                           f"namespace {namespace!r} holds the Prefect concurrency limit "
                           f"{name}; waited {waited:g} s (set KBSYNC_LOCK_TIMEOUT_S to wait "
                           "longer)") from exc
        yield


def flow_locks(settings: Settings) -> WriteLocks:
    """The flows' lock decision: the lock file, and on a Qdrant server this Prefect limit
    first (:mod:`kbsync.catalog.lock`'s rule; a flow always has a Prefect API)."""
    return WriteLocks(settings, distributed=prefect_limit)


def run_lock(settings: Settings, namespace: str, *, purpose: str = "ingest"
             ) -> AbstractContextManager[Settings]:
    """The write lock of one run: :func:`flow_locks` held for ``namespace``. On a Qdrant
    server the limit, then the lock file; on the embedded engine the lock file only.

    Args:
        purpose: recorded in the lock file, so a refused writer can name it.
    """
    return flow_locks(settings).hold(namespace, purpose)
