"""The task runner the ingest flow's per-root subflows use.

``threads`` (default) runs batches in a thread pool in the flow's process.
``dask`` hands them to a Dask cluster: an existing scheduler
(``KBSYNC_DASK_ADDRESS``, which needs a Qdrant server: ``KBSYNC_QDRANT_URL``)
or a local cluster of ``KBSYNC_TASK_WORKERS`` worker processes. Against a
Qdrant server each worker opens its own store handle and writes its batches.
With the embedded store (one process per folder) the workers only convert,
chunk and embed, and the flow's process writes (see :mod:`flows.executor`).
"""

from __future__ import annotations

from typing import Any

from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

from kbsync.errors import UsageError
from kbsync.settings import Settings


def workers_reach_store(settings: Settings) -> bool:
    """Whether the task runner's workers may open the store themselves: threads share
    this process's handle, Dask workers need a Qdrant server."""
    return settings.task_runner == "threads" or bool(settings.qdrant_url)


def build_task_runner(settings: Settings) -> TaskRunner[Any]:
    """A fresh task runner for one subflow run, as the settings ask.

    Its futures' type depends on the runner (threads or Dask), hence ``Any``: Prefect's
    ``Flow.with_options`` takes ``TaskRunner[PrefectFuture[Any]]``, which an invariant
    type parameter would not match for either concrete runner.
    """
    if settings.task_runner == "threads":
        return ThreadPoolTaskRunner(max_workers=settings.task_workers)
    try:
        import dask
        from prefect_dask import DaskTaskRunner
    except ImportError as exc:
        raise UsageError("KBSYNC_TASK_RUNNER=dask needs prefect-dask: "
                         "pip install -c constraints.txt -e '.[dask]'") from exc
    if settings.dask_address:
        if not settings.qdrant_url:
            raise UsageError("a remote Dask cluster needs a Qdrant server (KBSYNC_QDRANT_URL): "
                             "its workers cannot open this machine's embedded store")
        return DaskTaskRunner(address=settings.dask_address)
    # Worker processes start the conversion workers (multiprocessing children), which a
    # daemonic process may not have; the nanny reads this when it starts a worker.
    dask.config.set({"distributed.worker.daemon": False})
    return DaskTaskRunner(cluster_kwargs={"n_workers": settings.task_workers,
                                          "threads_per_worker": 1, "processes": True,
                                          "dashboard_address": None})
