"""The run-wide write lock, chosen by where the store lives.

- Embedded store (one machine): a lock file beside it (:mod:`kbsync.ingest.lock`).
- Qdrant server (workers on several machines): a Prefect global concurrency
  limit of 1 per (collection, namespace), created on first use, so runs on
  different machines queue behind each other; the file lock is taken as well,
  which costs nothing and also covers runs started without a Prefect server.
"""

from __future__ import annotations

import logging
import re
from contextlib import ExitStack, contextmanager
from typing import Iterator

from prefect import get_run_logger
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.concurrency.sync import concurrency
from prefect.exceptions import MissingContextError, ObjectNotFound

from kbsync.errors import LockHeld
from kbsync.ingest.lock import ingest_lock
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
def run_lock(settings: Settings, namespace: str, *, purpose: str = "ingest") -> Iterator[None]:
    """Hold the write lock for one ingest run, or another writer like one (see module doc).

    Args:
        purpose: recorded in the lock file, so a refused writer can name it.
    """
    logger = _logger()
    with ExitStack() as stack:
        if settings.qdrant_url:
            name = limit_name(settings, namespace)
            _ensure_limit(name)
            logger.info("acquiring global concurrency limit %s", name)
            # 0 means "refuse at once": Prefect reads a None timeout as "wait forever", so
            # allow just the acquisition's round trips.
            waited = settings.lock_timeout_s or REFUSE_WITHIN_S
            try:
                stack.enter_context(concurrency(name, occupy=1, strict=True,
                                                timeout_seconds=waited))
            except TimeoutError as exc:
                raise LockHeld(f"another ingest or remove of collection {settings.collection!r}, "
                               f"namespace {namespace!r} holds the Prefect concurrency limit "
                               f"{name}; waited {waited:g} s (set KBSYNC_LOCK_TIMEOUT_S to wait "
                               "longer)") from exc
        stack.enter_context(ingest_lock(settings, namespace, purpose=purpose))
        yield
