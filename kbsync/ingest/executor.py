"""How the runner's steps run: the executor interface and the in-process executor.

The runner (:mod:`kbsync.ingest.runner`) decides *what* runs and in which order;
an executor decides *where*. :class:`InProcess` calls each step at once in this
thread (the plain loop, ``add_text``, tests); ``flows.executor.PrefectExecutor``
runs each step as a Prefect task (threads, or Dask through Prefect) and each
root as a subflow. Both see the same calls, so the rules are the same.

A step's argument :data:`CONTEXT` stands for the live
:class:`~kbsync.ingest.context.IngestContext` of the process that runs it.

The write lock is carried, not decided: an executor holds the
:class:`~kbsync.catalog.lock.WriteLocks` its front door decided on
(:mod:`kbsync.catalog.lock`) and :meth:`Executor.write_lock` holds it.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Callable, Protocol, Sequence, TypeVar

from kbsync.catalog.lock import WriteLocks
from kbsync.ingest.context import IngestConfig, IngestContext
from kbsync.models import RootSpec
from kbsync.text.chunk import ChunkConfig

T = TypeVar("T")


class _Context:
    """The placeholder for the live context in a step's arguments."""

    def __repr__(self) -> str:
        return "CONTEXT"

    def __reduce__(self) -> str:  # pickles (to a Dask worker) as the one instance
        return "CONTEXT"


CONTEXT: Any = _Context()


def bind(args: Sequence[Any], ctx: IngestContext) -> list[Any]:
    """``args`` with :data:`CONTEXT` replaced by ``ctx``."""
    return [ctx if a is CONTEXT else a for a in args]


class Executor(Protocol):
    """Runs the runner's steps.

    ``submit`` returns a handle that later ``submit`` calls may take as arguments
    (the step then gets the handle's value) and ``gather`` resolves; ``after``
    names handles the step is drawn after without taking their values.
    """

    config: IngestConfig
    chunk_config: ChunkConfig  # a value: the chunk step needs nothing else

    def call(self, step: Callable[..., T], *args: Any, label: str) -> T:
        """Run ``step(*args)`` and return its value."""

    def here(self, step: Callable[..., T], *args: Any, label: str) -> T:
        """Run ``step(*args)`` in the run's own process and step, recorded as nothing of its
        own (no task run): for what a run with nothing to write does (plans, an idle root's
        finish), so a no-op costs no run per root (:func:`kbsync.ingest.runner.is_idle`)."""

    def submit(self, step: Callable[..., Any], *args: Any, label: str,
               after: Sequence[Any] = ()) -> Any:
        """Start ``step(*args)``; return a handle."""

    def gather(self, handles: Sequence[Any]) -> list[Any]:
        """The values of ``handles``, in order (waits for them)."""

    def run_root(self, name: str, body: Callable[[], dict]) -> dict:
        """Run one root's part of the ingest (``body``) and return its summary dict."""

    def write_lock(self, namespace: str) -> AbstractContextManager:
        """The run-wide write lock of ``namespace``: the door's decision, held."""

    def choose_model(self, roots: Sequence[RootSpec], *, dry_run: bool) -> None:
        """Under the write lock, before any check: a new collection's model, chosen once
        from its shares' language (:mod:`kbsync.ingest.model_choice`); the executor's
        steps then embed with it. An executor that does not choose leaves it alone."""

    def progress(self, root: str, total: int) -> Callable[[int], None]:
        """A callback told how many of ``total`` batches of ``root`` are done."""


class InProcess:
    """Every step called at once, in the caller's thread (no Prefect at all).

    Args:
        ctx: the live collaborators.
        locks: the front door's lock decision, held by :meth:`write_lock` with ``purpose``.
        purpose: what the lock file records (``ingest``, ``add_text``...).
        write_lock: ``namespace -> context manager`` instead of ``locks`` (a caller with
            its own, e.g. a rebuild's); with neither, none (the caller holds the lock).
    """

    def __init__(self, ctx: IngestContext, *, locks: WriteLocks | None = None,
                 purpose: str = "ingest",
                 write_lock: Callable[[str], AbstractContextManager] | None = None) -> None:
        self.ctx = ctx
        self.config = ctx.config
        self.chunk_config = ctx.chunk_config
        self._write_lock = locks.for_purpose(purpose) if locks is not None else write_lock

    def call(self, step: Callable[..., T], *args: Any, label: str = "") -> T:
        """Run ``step`` now."""
        return step(*bind(args, self.ctx))

    def here(self, step: Callable[..., T], *args: Any, label: str = "") -> T:
        """Run ``step`` now (as :meth:`call`)."""
        return step(*bind(args, self.ctx))

    def submit(self, step: Callable[..., Any], *args: Any, label: str = "",
               after: Sequence[Any] = ()) -> Any:
        """Run ``step`` now; the handle is its value."""
        return step(*bind(args, self.ctx))

    def gather(self, handles: Sequence[Any]) -> list[Any]:
        """The handles are values already."""
        return list(handles)

    def run_root(self, name: str, body: Callable[[], dict]) -> dict:
        """Call ``body``."""
        return body()

    def write_lock(self, namespace: str) -> AbstractContextManager:
        """The lock given at construction (the door's decision), or none."""
        from contextlib import nullcontext

        return self._write_lock(namespace) if self._write_lock else nullcontext()

    def choose_model(self, roots: Sequence[RootSpec], *, dry_run: bool) -> None:
        """Nothing: the plain loop and ``add_text`` embed with the runtime they are given."""

    def progress(self, root: str, total: int) -> Callable[[int], None]:
        """No progress display in process (the log line per batch is the runner's)."""
        return lambda done: None
