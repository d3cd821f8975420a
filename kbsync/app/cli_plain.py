"""The executor of a ``kbsync ingest`` with no Prefect API: every step in this thread.

:class:`~kbsync.ingest.executor.InProcess` plus what the flow's executor does besides
placing steps, so the two ways of ``kbsync ingest`` cannot drift
(:mod:`kbsync.app.cli_ingest`): it opens its own runtime as the flow's process does
(the embedded store held for the run, other processes' reads served through it, and a
``kbsync serve`` holding the store asked to hand it over: :func:`kbsync.store.open_store`),
and, under the write lock, chooses a new collection's model from its shares' language
(:func:`kbsync.ingest.model_choice.choose_model`), closing the default runtime before the
chosen one opens (one store handle per process).
"""

from __future__ import annotations

from typing import Sequence

from kbsync.catalog.lock import WriteLocks
from kbsync.ingest.executor import InProcess
from kbsync.models import RootSpec
from kbsync.runtime import Runtime
from kbsync.settings import Settings


class PlainExecutor(InProcess):
    """In-process steps with a runtime of their own and the flow's model choice.

    Args:
        settings: the run's settings (resolved to the active collection).
        locks: the door's lock decision (:func:`kbsync.app.locks.write_locks`).
    """

    def __init__(self, settings: Settings, *, locks: WriteLocks) -> None:
        self.runtime = Runtime.open(settings, serve_readers=True)
        super().__init__(self.runtime, locks=locks)

    def choose_model(self, roots: Sequence[RootSpec], *, dry_run: bool) -> None:
        """As the flow's executor: a new collection's model follows its shares' language."""
        from kbsync.ingest.model_choice import choose_model

        chosen = choose_model(self.runtime.settings, roots, dry_run=dry_run)
        if chosen is not self.runtime.settings:
            self.runtime.close()
            self.runtime = self.ctx = Runtime.open(chosen, serve_readers=True)
            self.config, self.chunk_config = self.ctx.config, self.ctx.chunk_config

    def describe_embedder(self) -> str:
        """``provider/model (N dims)`` of the run's embedder, as the flow's log names it."""
        service = self.runtime.service
        return f"{service.provider}/{service.model} ({service.dimension} dims)"

    def close(self) -> None:
        """Close the runtime (the store handle, the conversion workers)."""
        self.runtime.close()
