"""The ``rebuild`` flow: the rebuild runner (:mod:`kbsync.maintenance.rebuild_runner`) on Prefect.

The sequence (shadow ingest -> evaluate live and shadow -> replay -> state check -> gate
-> swap or discard) and the lock scope are the runner's, the plain call's too; here each
step runs as a task and each shadow ingest through the ingest flow's executor, with its
``ingest-root`` subflows (:mod:`flows.rebuild_executor`), so the run graph shows every
batch. The new settings are the run's ``KBSYNC_*`` environment, with the ``build``
parameter on top (embedding provider/model/dimensions, chunk budget/overlap, contextual
text). A refused rebuild ends Completed named ``Refused`` with the report as its result;
the CLI exits 3 then. A refusal before the build (``MassDeleteRefused``, a usage error of
the checks) ends it Failed with one ERROR line (:mod:`tasks.refusals`).
"""

from __future__ import annotations

from typing import Annotated, Any

from prefect import flow, get_run_logger
from prefect.runtime import flow_run
from prefect.states import Completed, Failed
from pydantic import Field

from flows.rebuild_executor import PrefectRebuildExecutor
from kbsync.errors import KbsyncError
from kbsync.ingest.summary import new_run_id
from kbsync.maintenance.rebuild_runner import (DEFAULT_MAX_DROP, BuildSettings, RebuildRequest,
                                               checked_build, run_rebuild, target_settings)
from kbsync.settings import load_settings
from tasks.locking import flow_locks
from tasks.rebuild_tasks import publish_rebuild
from tasks.refusals import is_refusal, refusal_line
from tasks.run_names import rebuild_run_name
from tasks.watchdog import FLOW_HOOKS, start_flow_watch


@flow(name="rebuild", flow_run_name=rebuild_run_name, log_prints=False, validate_parameters=True, **FLOW_HOOKS)
def rebuild(
    queries_file: Annotated[str, Field(min_length=1)],
    namespace: Annotated[str, Field(min_length=1, max_length=200)] = "default",
    max_drop: Annotated[float, Field(ge=0, le=1)] = DEFAULT_MAX_DROP,
    modes: Annotated[list[str], Field(min_length=1)] = ["dense", "hybrid"],  # noqa: B006
    k: Annotated[int, Field(ge=1, le=100)] = 10,
    build: BuildSettings = BuildSettings(),  # noqa: B008 - immutable in use; the form shows its fields
) -> dict[str, Any]:
    """Rebuild the collection with new settings in a shadow; swap it in only if it is no worse.

    Args:
        queries_file: JSONL or CSV labelled queries (as for evaluate), run on the shadow and the live collection.
        namespace: Namespace the queries are evaluated in (every namespace of the collection is rebuilt).
        max_drop: Largest allowed drop of nDCG@10 (any mode) of the shadow against the live collection.
        modes: Retrieval modes to compare (dense, hybrid); each must pass.
        k: Documents ranked per query (nDCG is always @10).
        build: New settings over the worker's KBSYNC_* (each empty field keeps the worker's), e.g. {"chunk_tokens": 200} or {"embed_model": "multilingual-e5-small"}.
    """  # noqa: E501 - one line per parameter keeps Prefect's docstring parser exact
    settings = load_settings()
    # An unknown build setting is a usage error here, before the watch starts.
    start_flow_watch(target_settings(settings, build))
    request = RebuildRequest(settings=settings, queries_file=queries_file, namespace=namespace,
                             max_drop=max_drop, modes=tuple(modes), k=k,
                             build=checked_build(build),
                             run_id=str(flow_run.get_id() or new_run_id()))
    # The flow is the rebuild's door: it decides the lock once, its executor holds it.
    try:
        report = run_rebuild(request, PrefectRebuildExecutor(locks=flow_locks(settings)))
    except KbsyncError as exc:
        if not is_refusal(exc):
            raise
        # One ERROR line, the flow's: the check's task ended Refused (tasks.refusals).
        line = refusal_line(exc)
        get_run_logger().error("%s", line)
        return Failed(message=line, data=exc)  # type: ignore[return-value]
    publish_rebuild(report)  # in the flow body: the artifacts belong to this flow run
    if not report["swapped"]:
        # A flow may return a State to set its final state (Prefect resolves it at run time);
        # Prefect's types take the annotation as the only return type.
        return Completed(data=report, name="Refused",  # type: ignore[return-value]
                         message="; ".join(report["decision"]["reasons"]))
    return report
