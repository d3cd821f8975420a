"""The whole rebuild without Prefect: the rebuild sequence
(:mod:`kbsync.maintenance.rebuild_runner`) on the in-process executor.

Runtimes are opened through an injected ``open_runtime`` (``kbsync.runtime.Runtime.open``,
which lives above this wing), once for the shadow; the live collection is read through
the shadow's store (:func:`kbsync.maintenance.rebuild_steps.live_runtime`). The write
locks are the caller's door's decision (a :class:`~kbsync.catalog.lock.WriteLocks`), held
for each collection the runner locks (:func:`~kbsync.maintenance.rebuild_runner.locks_for`);
nothing here decides whether the distributed lock is taken.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, contextmanager
from typing import Any, Callable, Iterator

from kbsync.catalog.lock import WriteLocks, given_or_embedded
from kbsync.eval.queries import EvalQuery
from kbsync.eval.run import ModeSpec
from kbsync.ingest.executor import Executor, InProcess as IngestInProcess
from kbsync.maintenance import rebuild as rb
from kbsync.maintenance import rebuild_steps as steps
from kbsync.maintenance.rebuild_runner import RebuildRequest, locks_for, run_rebuild
from kbsync.maintenance.rebuild_steps import RebuildRuntime
from kbsync.settings import Settings
from kbsync.store.base import VectorStore

OpenRuntime = Callable[[Settings], RebuildRuntime]
"""``settings -> runtime``: opens the store and the embedding service of ``settings``."""


class InProcess:
    """Every step of the rebuild sequence called at once, in this thread (no Prefect).

    Args:
        open_runtime: opens the shadow's runtime (``kbsync.runtime.Runtime.open``);
            the executor owns it and closes it in :meth:`release`.
        locks: the front door's lock decision, held (named ``rebuild``) for every
            collection the runner locks.
    """

    def __init__(self, open_runtime: OpenRuntime, *, locks: WriteLocks) -> None:
        self._open = open_runtime
        self._locks = locks
        self._shadow: RebuildRuntime | None = None
        self._live: RebuildRuntime | None = None

    def write_lock(self, settings: Settings, namespace: str) -> AbstractContextManager:
        """The door's lock of ``settings``' collection, named as the rebuild's."""
        return locks_for(self._locks, settings).hold(namespace, "rebuild")

    def open_shadow(self, shadow: Settings) -> VectorStore:
        """Open the shadow's runtime (once); its store."""
        if self._shadow is None:
            self._shadow = self._open(shadow)
        return self._shadow.store

    def _shadow_rt(self) -> RebuildRuntime:
        if self._shadow is None:
            raise RuntimeError("open_shadow() first: the rebuild's steps run on its store")
        return self._shadow

    def _live_rt(self, live: Settings) -> RebuildRuntime:
        if self._live is None or self._live.settings != live:
            self._live = steps.live_runtime(live, self._shadow_rt())
        return self._live

    def check_before_build(self, plan: rb.RebuildPlan, queries: list[EvalQuery],
                           live: Settings, shadow: Settings, *,
                           namespace: str) -> rb.RebuildPlan:
        """The checks, on the live runtime."""
        return steps.check_before_build(plan, queries, self._live_rt(live), namespace=namespace)

    def prepare_shadow(self, plan: rb.RebuildPlan, shadow: Settings,
                       run_id: str) -> rb.RebuildPlan:
        """Resume or discard a leftover shadow; record the build settings in it."""
        return rb.prepare_shadow(plan, self._shadow_rt().store, run_id=run_id)

    @contextmanager
    def shadow_ingest(self, shadow: Settings, *, locked: bool,
                      tags: tuple[str, ...]) -> Iterator[Executor]:
        """The ingest runner's in-process executor on the shadow's runtime (``tags``: no
        record to name here)."""
        # Through write_lock: the shadow's lock is the same door's decision, for the shadow.
        lock = (lambda ns: self.write_lock(shadow, ns)) if locked else None
        yield IngestInProcess(self._shadow_rt(), write_lock=lock)

    def evaluate(self, queries: list[EvalQuery], specs: list[ModeSpec], which: str,
                 live: Settings, shadow: Settings, *, namespace: str, k: int) -> dict[str, Any]:
        """Evaluate the live or the shadow collection."""
        runtime = self._shadow_rt() if which == "shadow" else self._live_rt(live)
        return steps.evaluate_collection(queries, specs, runtime, namespace=namespace, k=k)

    def state_check(self, plan: rb.RebuildPlan, live: Settings,
                    shadow: Settings) -> dict[str, Any]:
        """Does the shadow's state match the shares and the live collection?"""
        return rb.state_check(plan, self._shadow_rt(), self._live_rt(live))

    def swap(self, plan: rb.RebuildPlan, target: Settings, shadow: Settings) -> dict[str, Any]:
        """Point the logical collection at the shadow."""
        return rb.swap(plan, target, self._shadow_rt().store)

    def discard(self, plan: rb.RebuildPlan, shadow: Settings) -> None:
        """Drop the refused shadow."""
        rb.discard(self._shadow_rt().store, plan.shadow)

    def release(self, live: Settings | None, shadow: Settings) -> None:
        """Close the live runtime (its store is borrowed), then the shadow's (the store)."""
        runtimes, self._live, self._shadow = [self._live, self._shadow], None, None
        for runtime in runtimes:
            if runtime is not None:
                runtime.close()


def rebuild_plain(request: RebuildRequest, *, open_runtime: OpenRuntime,
                  locks: WriteLocks | None = None) -> dict[str, Any]:
    """The whole rebuild in this thread: what the ``rebuild`` flow does, in one call.

    Args:
        locks: the front door's lock decision (``kbsync.app.locks.write_locks``); without
            it, the lock file alone, on the embedded engine only
            (:func:`kbsync.catalog.lock.given_or_embedded`), as for
            :func:`kbsync.ingest.runner.run_plain`.
    Returns:
        The report of :func:`~kbsync.maintenance.rebuild_runner.run_rebuild` (``swapped``
        False when the gate refused).
    Raises:
        UsageError: no ``locks`` against a Qdrant server (before any step).
        As :func:`~kbsync.maintenance.rebuild_runner.run_rebuild`.
    """
    locks = given_or_embedded(locks, request.settings)
    return run_rebuild(request, InProcess(open_runtime, locks=locks))
