"""The Prefect executor of the rebuild runner: each step a task, each shadow ingest the
ingest flow's executor.

:func:`kbsync.maintenance.rebuild_runner.run_rebuild` decides what runs, in which order,
and where the locks go; this only says how, in Prefect:
- a step runs as its task of :mod:`tasks.rebuild_tasks`, on the process-wide runtimes of
  :mod:`tasks.resources` (the shadow's owns the store; the live one borrows it);
- a shadow ingest (the build, the replay) runs the ingest runner on
  :class:`flows.executor.PrefectExecutor`, so every root is an ``ingest-root`` subflow
  tagged ``shadow`` or ``replay`` and ``namespace:NS``;
- the write lock is the flow's decision it is given (:func:`tasks.locking.flow_locks`: a
  Prefect concurrency limit on a Qdrant server, and the lock file), held for each
  collection through :func:`kbsync.maintenance.rebuild_runner.locks_for` and named
  ``rebuild`` for a refused writer; nothing here decides it.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Iterator

from prefect import tags as prefect_tags

from flows.executor import PrefectExecutor
from kbsync.catalog.lock import WriteLocks
from kbsync.eval.queries import EvalQuery
from kbsync.eval.run import ModeSpec
from kbsync.ingest.executor import Executor
from kbsync.maintenance import rebuild as rb
from kbsync.maintenance.rebuild_runner import locks_for
from kbsync.settings import Settings
from kbsync.store.base import VectorStore
from tasks import rebuild_tasks as t
from tasks.refusals import unwrap
from tasks.resources import release, runtime_for


class _Shadow(PrefectExecutor):
    """The shadow's ingest executor with its own write lock (on a server: the shadow's),
    ``locks`` being the flow's decision held for the shadow."""

    def write_lock(self, namespace: str) -> AbstractContextManager:
        """The shadow's lock, named as the rebuild's."""
        return self.locks.hold(namespace, "rebuild")


class _Unlocked(PrefectExecutor):
    """The shadow's ingest executor while the rebuild holds the lock that covers it (one
    lock file covers the embedded store: taking it again would wait on ourselves)."""

    def write_lock(self, namespace: str) -> AbstractContextManager:
        """No lock: the runner holds it (see the class docstring)."""
        return nullcontext()


class PrefectRebuildExecutor:
    """The rebuild sequence's steps as Prefect tasks inside the current flow run.

    Args:
        locks: the flow's lock decision (:func:`tasks.locking.flow_locks`), held (named
            ``rebuild``) for every collection the runner locks.
    """

    def __init__(self, *, locks: WriteLocks) -> None:
        self.locks = locks

    def write_lock(self, settings: Settings, namespace: str) -> AbstractContextManager:
        """The flow's lock of ``settings``' collection, named as the rebuild's."""
        return locks_for(self.locks, settings).hold(namespace, "rebuild")

    def open_shadow(self, shadow: Settings) -> VectorStore:
        """The shadow's process-wide runtime (it serves other processes' reads)."""
        return runtime_for(shadow).store

    def check_before_build(self, plan: rb.RebuildPlan, queries: list[EvalQuery],
                           live: Settings, shadow: Settings, *,
                           namespace: str) -> rb.RebuildPlan:
        """The ``check-before-build`` task (a refusal it ended on raised here)."""
        return unwrap(t.check_before_build(plan, queries, live, shadow, namespace=namespace))

    def prepare_shadow(self, plan: rb.RebuildPlan, shadow: Settings,
                       run_id: str) -> rb.RebuildPlan:
        """The ``prepare-shadow`` task."""
        return t.prepare_shadow(plan, shadow, run_id)

    @contextmanager
    def shadow_ingest(self, shadow: Settings, *, locked: bool,
                      tags: tuple[str, ...]) -> Iterator[Executor]:
        """The ingest flow's executor on the shadow, under ``tags`` (its tasks and its
        ``ingest-root`` subflows carry them)."""
        with prefect_tags(*tags):
            yield (_Shadow(shadow, locks=locks_for(self.locks, shadow)) if locked
                   else _Unlocked(shadow, locks=self.locks))

    def evaluate(self, queries: list[EvalQuery], specs: list[ModeSpec], which: str,
                 live: Settings, shadow: Settings, *, namespace: str, k: int) -> dict[str, Any]:
        """The ``evaluate-<which>`` task."""
        return t.evaluate_collection(queries, specs, which, live, shadow, namespace=namespace,
                                     k=k)

    def state_check(self, plan: rb.RebuildPlan, live: Settings,
                    shadow: Settings) -> dict[str, Any]:
        """The ``state-check`` task."""
        return t.state_check(plan, live, shadow)

    def swap(self, plan: rb.RebuildPlan, target: Settings, shadow: Settings) -> dict[str, Any]:
        """The ``swap`` task."""
        return t.swap(plan, target, shadow)

    def discard(self, plan: rb.RebuildPlan, shadow: Settings) -> None:
        """The ``discard-shadow`` task."""
        t.discard(plan, shadow)

    def release(self, live: Settings | None, shadow: Settings) -> None:
        """Forget the live runtime, then close the shadow's (the store)."""
        if live is not None:
            t.release_live(live)
        release(shadow)
