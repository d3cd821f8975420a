"""The Prefect executor of the ingest runner: each step a task, each root a subflow.

:mod:`kbsync.ingest.runner` decides what runs; this only says how, in Prefect:
- a step runs as its task of :data:`tasks.ingest_tasks.TASK_OF`, named after the
  root and batch (``batch pydoc 3/15``) and drawn after the plan it came from;
- a root runs as an ``ingest-root`` subflow on the configured task runner
  (threads, or Dask); a root with failed files ends its subflow ``Completed`` named
  ``Completed with failures`` with its summary: the parent flow decides whether the
  run is Failed (a subflow's failure shows once, on its parent); a refusal ends it
  ``Stopped`` and the parent raises it (:mod:`tasks.refusals`);
- the write lock is the flow's lock decision (:func:`tasks.locking.flow_locks`, or the
  :class:`~kbsync.catalog.lock.WriteLocks` the flow passes): a Prefect concurrency
  limit on a Qdrant server, and the lock file;
- progress is a Prefect progress artifact per root.

On Dask process workers with the embedded store (which admits one process per
folder), the workers do only what opens no store (:data:`kbsync.ingest.steps.STORE_FREE`):
a batch's convert -> chunk -> embed runs as its ``batch ROOT n/N`` task on a
worker (:func:`kbsync.ingest.steps.prepare`), and its write runs as a ``write ROOT
n/N`` task in this process when the runner gathers it, in batch order
(:func:`kbsync.ingest.steps.write`: upsert, delete stale, state last, per
document). Every other step runs here too.
"""

from __future__ import annotations

import itertools
from contextlib import AbstractContextManager
from typing import Any, Callable, Sequence

from prefect import flow, tags
from prefect.futures import wait
from prefect.states import Completed
from prefect.utilities.annotations import quote

from kbsync.catalog.lock import WriteLocks
from kbsync.errors import FilesFailed
from kbsync.ingest import steps
from kbsync.ingest.executor import CONTEXT, bind
from kbsync.ingest.model_choice import choose_model
from kbsync.models import RootSpec
from kbsync.settings import Settings
from tasks.artifacts import report_progress, start_progress
from tasks.ingest_tasks import TASK_OF
from tasks.locking import flow_locks
from tasks.refusals import Stopped, refused, unwrap
from tasks.resources import release, runtime_for
from tasks.runners import build_task_runner, workers_reach_store

_bodies: dict[str, Callable[[], dict]] = {}  # a subflow's work, by key (not a parameter)
_keys = itertools.count()  # next() and dict.pop are atomic under the GIL


def _take_body(key: str) -> Callable[[], dict]:
    # A module function, so the subflow's function (pickled by value into a Dask task's
    # context) refers to it by name and does not drag the registry along.
    return _bodies.pop(key)


@flow(name="ingest-root", flow_run_name="ingest-root-{root_name}", validate_parameters=False)
def ingest_root(root_name: str, body_key: str) -> dict:
    """One root of an ingest run: plan, batches through the stages, heal and deletions.

    Never ends Failed for its files: with failed files it ends ``Completed with
    failures`` (the message counts them) and its parent decides the run's state, so a
    failure shows once, on the parent. A refusal ends it ``Stopped``, the error its result.
    """
    try:
        part = _take_body(body_key)()
    except Exception as exc:  # noqa: BLE001 - refused() raises anything but a refusal
        # A flow may return a State to set its final state (Prefect resolves it at run time);
        # Prefect's types take the annotation as the only return type.
        return refused(exc, name="Stopped")  # type: ignore[return-value]
    if part["failed"]:
        message = f"{part['failed']} of {part['files_seen']} files of root {root_name} failed"
        return Completed(message=message, name="Completed with failures",  # type: ignore[return-value]
                         data=part)
    return part


class _Done:
    """The handle of a step ``submit`` ran at once in this process (its value)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class _WriteHere:
    """The handle of a batch whose CPU work runs on a worker (``future``) and whose write
    runs in this process once the runner gathers it."""

    __slots__ = ("future", "write", "label", "namespace", "run_id")

    def __init__(self, future: Any, write: Callable, label: str, namespace: str,
                 run_id: str) -> None:
        self.future, self.write, self.label = future, write, label
        self.namespace, self.run_id = namespace, run_id


class PrefectExecutor:
    """Runs the runner's steps as Prefect tasks inside the current flow run."""

    run_tags: tuple[str, ...] = ()
    """Tags of every ``ingest-root`` subflow beside ``root:NAME`` (a subclass's ``shadow`` or
    ``replay``; the ingest flow's ``namespace:NS``), so the UI's tag filters find them."""

    def __init__(self, settings: Settings, run_tags: tuple[str, ...] = (), *,
                 chooses_model: bool = False, locks: WriteLocks | None = None) -> None:
        """``locks``: the flow's lock decision, carried to :meth:`write_lock` (default:
        :func:`tasks.locking.flow_locks`, the flows' rule)."""
        self.run_tags = (*type(self).run_tags, *run_tags)
        self.locks = locks if locks is not None else flow_locks(settings)
        self._progress: dict[str, Any] = {}  # a root's progress artifact, by root name
        self._chooses = chooses_model
        self._target(settings)

    def _target(self, settings: Settings) -> None:
        """Run every later step with ``settings`` (their runtime opened here)."""
        runtime = runtime_for(settings)
        self.settings = settings
        self.config = runtime.config
        self.chunk_config = runtime.chunk_config
        self._quote = settings.task_runner == "threads"
        self._split = not workers_reach_store(settings)

    def choose_model(self, roots: Sequence[RootSpec], *, dry_run: bool) -> None:
        """With ``chooses_model`` (the ingest flow): a new collection's model follows its
        shares' language (:func:`kbsync.ingest.model_choice.choose_model`), and the runtime
        of the default model is closed before the chosen one opens (one store handle per
        process). Other executors (a rebuild's shadow and replay) keep their settings."""
        if not self._chooses:
            return
        chosen = choose_model(self.settings, roots, dry_run=dry_run)
        if chosen is not self.settings:
            release(self.settings)
            self._target(chosen)

    def _args(self, args: Sequence[Any]) -> list[Any]:
        """Task arguments: the settings for CONTEXT, and every value quoted, so Prefect does
        not walk plans and batches of thousands of records looking for futures (a
        root's plan of 1,000 files took 0.7 s to walk); dependencies go by ``wait_for``.

        Not on Dask: prefect-dask hands a quoted argument to the task still wrapped.
        """
        values = [self.settings if a is CONTEXT else a for a in args]
        return [quote(v) for v in values] if self._quote else values

    def call(self, step: Callable, *args: Any, label: str) -> Any:
        """Run ``step``'s task and return its value (a refusal it ended on raised)."""
        return unwrap(TASK_OF[step].with_options(task_run_name=label)(*self._args(args)))

    def here(self, step: Callable, *args: Any, label: str) -> Any:
        """Run ``step`` in this process, in the flow run's own step: no task run (what a
        no-op does: its plans, an idle root's finish; :func:`kbsync.ingest.runner.is_idle`)."""
        return step(*bind(args, runtime_for(self.settings)))

    def submit(self, step: Callable, *args: Any, label: str, after: Sequence[Any] = ()) -> Any:
        """Submit ``step``'s task to the task runner; the handle is its future.

        Where the workers cannot reach the store, a batch is split (its CPU work
        submitted, its write kept for :meth:`gather`) and any other step that needs
        the store runs at once, here.
        """
        if not self._split:
            return self._submit(step, args, label, after)
        spec = steps.STEPS[step]
        if spec.split is not None:  # a batch: prepare on a worker, write here when gathered
            first, second = spec.split
            ctx, chunk_config, items, namespace, run_id = args
            future = self._submit(first, (ctx, chunk_config, items), label, after)
            return _WriteHere(future, second, label, namespace, run_id)
        if spec.store_free:
            return self._submit(step, args, label, after)
        return _Done(self.call(step, *args, label=label))

    def _submit(self, step: Callable, args: Sequence[Any], label: str,
                after: Sequence[Any]) -> Any:
        named = TASK_OF[step].with_options(task_run_name=label)
        # A step run at once is done: nothing to wait for (its edge is not drawn).
        waits = [h for h in after if not isinstance(h, _Done)]
        return named.submit(*self._args(args), wait_for=waits or None)

    def gather(self, handles: Sequence[Any]) -> list[Any]:
        """Wait for the futures; their results, in order (a failed one raises).

        A split batch's write runs here, in the order of ``handles``.
        """
        wait([h.future if isinstance(h, _WriteHere) else h for h in handles
              if not isinstance(h, _Done)])
        return [self._value(h) for h in handles]

    def _value(self, handle: Any) -> Any:
        if isinstance(handle, _Done):
            return handle.value
        if isinstance(handle, _WriteHere):
            label = handle.label.replace("batch", "write", 1)
            return self.call(handle.write, CONTEXT, handle.future.result(), handle.namespace,
                             handle.run_id, label=label)
        return unwrap(handle.result())

    def run_root(self, name: str, body: Callable[[], dict]) -> dict:
        """``body`` in an ``ingest-root`` subflow; its summary (a refusal it stopped on
        raised; a Failed subflow's summary, from a run of an earlier release, too)."""
        key = str(next(_keys))
        _bodies[key] = body
        subflow = ingest_root.with_options(task_runner=build_task_runner(self.settings))
        with tags(f"root:{name}", *self.run_tags):
            state = subflow(root_name=name, body_key=key, return_state=True)
        outcome = state.result(raise_on_failure=False)
        if isinstance(outcome, Stopped):
            raise outcome.error
        if isinstance(outcome, FilesFailed):
            return outcome.result
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def write_lock(self, namespace: str) -> AbstractContextManager:
        """The run-wide write lock: the flow's decision held (taken before a model is
        chosen, so the settings it was decided with name the lock)."""
        return self.locks.hold(namespace, "ingest")

    def progress(self, root: str, total: int) -> Callable[[int], None]:
        """A Prefect progress artifact for the root's batches, updated at each tenth and at
        the end (an update per batch cost an API call per batch). One artifact a root: a
        root planned in slices calls this once a slice, with the batches planned so far."""
        if root not in self._progress:
            self._progress[root] = start_progress(root)
        artifact = self._progress[root]
        step = max(1, total // 10)

        def report(done: int) -> None:
            if done == total or done % step == 0:
                report_progress(artifact, done, total)
        return report
