"""The task runner the ingest flow's per-root subflows use.

``threads`` (default) runs batches in a thread pool in the flow's process.
``dask`` hands them to a Dask cluster: an existing scheduler
(``KBSYNC_DASK_ADDRESS``) or a local one. Each Dask worker process opens its
own store handle, so process-based workers need a Qdrant server
(``KBSYNC_QDRANT_URL``): the embedded engine admits one process per folder, and
with it a local cluster runs its workers as threads of this process.
"""

from __future__ import annotations

from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

from kbsync.errors import UsageError
from kbsync.settings import Settings


def build_task_runner(settings: Settings) -> TaskRunner:
    """A fresh task runner for one subflow run, as the settings ask."""
    if settings.task_runner == "threads":
        return ThreadPoolTaskRunner(max_workers=settings.task_workers)
    try:
        from prefect_dask import DaskTaskRunner
    except ImportError as exc:
        raise UsageError("KBSYNC_TASK_RUNNER=dask needs prefect-dask: "
                         "pip install -c constraints.txt -e '.[dask]'") from exc
    if settings.dask_address:
        if not settings.qdrant_url:
            raise UsageError("a remote Dask cluster needs a Qdrant server (KBSYNC_QDRANT_URL): "
                             "its workers cannot open this machine's embedded store")
        return DaskTaskRunner(address=settings.dask_address)
    processes = bool(settings.qdrant_url)
    return DaskTaskRunner(cluster_kwargs={"n_workers": settings.task_workers,
                                          "threads_per_worker": 1, "processes": processes,
                                          "dashboard_address": None})
