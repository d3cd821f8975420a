"""The executor of a ``kbsync ingest`` with no Prefect API: every step in this thread.

:class:`~kbsync.ingest.executor.InProcess` plus what the flow's executor does besides
placing steps, so the two ways of ``kbsync ingest`` cannot drift
(:mod:`kbsync.app.cli_ingest`): it opens its own runtime as the flow's process does
(the embedded store held for the run, other processes' reads served through it, and a
``kbsync serve`` holding the store asked to hand it over: :func:`kbsync.store.open_store`),
and, under the write lock, chooses a new collection's model from its shares' language
(:func:`kbsync.ingest.model_choice.choose_model`), closing the default runtime before the
chosen one opens (one store handle per process).

Beside it, the pieces both ways of the command share: the request and the flow's parameters
made from the command's arguments (:func:`plain_request`, :func:`flow_parameters`), a run in
process (:func:`run_in_process`), and the first-ingest test (:func:`first_ingest`).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
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


def globs(patterns: Sequence[str]) -> list[str]:
    """Globs in the display form of relative paths (``\\xNN``, as in doc_ids), which they match."""
    from kbsync.models import display_text

    return [display_text(g) for g in patterns]


def flow_parameters(args) -> dict:
    """The ``ingest`` flow's parameters for the command's arguments, as JSON values (the
    flow validates them into its types)."""
    from kbsync.ingest.discover import root_parameter

    return dict(roots=[root_parameter(r) for r in args.roots], namespace=args.namespace,
                mode=args.mode, force=args.force, dry_run=args.dry_run,
                include=globs(args.include), exclude=globs(args.exclude),
                allow_mass_delete=args.allow_mass_delete,
                max_delete_fraction=args.max_delete_fraction, rebind=args.rebind)


def plain_request(args, run_id: str | None = None):
    """The runner's :class:`~kbsync.ingest.runner.IngestRequest` for the command's
    arguments (a fresh run id unless ``run_id``)."""
    from kbsync.ingest.discover import parse_root
    from kbsync.ingest.plan import DeleteGuard
    from kbsync.ingest.runner import IngestRequest
    from kbsync.models import SyncMode

    given = {"run_id": run_id} if run_id else {}
    return IngestRequest(
        roots=tuple(parse_root(r) for r in args.roots), namespace=args.namespace,
        mode=SyncMode(args.mode), force=args.force, dry_run=args.dry_run,
        include=tuple(globs(args.include)), exclude=tuple(globs(args.exclude)),
        guard=DeleteGuard(args.allow_mass_delete, args.max_delete_fraction), rebind=args.rebind,
        **given)


def run_in_process(request, executor, *, status: bool) -> tuple[dict, str]:
    """``request`` run by ``executor`` (closed after): the JSON summary and the embedder's
    description."""
    try:
        return run_keeping_open(request, executor, status=status)
    finally:
        executor.close()


def run_keeping_open(request, executor, *, status: bool) -> tuple[dict, str]:
    """``request`` run by ``executor``, left open: the JSON summary and the embedder's
    description."""
    from kbsync.ingest.runner import run_ingest

    with _status_line(status):
        result = run_ingest(request, executor).to_dict()
    return result, executor.describe_embedder()


def _status_line(shown: bool) -> AbstractContextManager[None]:
    """The spinner of :func:`kbsync.app.console.ingest_status` when ``shown``, else nothing.

    ``ingest_status(enabled=False)`` does nothing either, but importing it imports rich
    (about 12 ms of a no-op ``--json`` run's start): without a status line it is not
    imported at all."""
    if not shown:
        return nullcontext()
    from kbsync.app.console import ingest_status

    return ingest_status(enabled=True)


def first_ingest(settings) -> bool:
    """No chunk collection yet in the embedded store (looked for, never opened)."""
    if settings.qdrant_url:
        return False
    from kbsync.store.edge.query import collection_created

    return not collection_created(settings.store_path, settings.collection)
