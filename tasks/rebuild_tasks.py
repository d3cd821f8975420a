"""The rebuild's steps as Prefect tasks: thin wrappers over :mod:`kbsync.maintenance.rebuild`
and :mod:`kbsync.maintenance.rebuild_steps`.

The shadow's runtime is the process-wide one of :mod:`tasks.resources` (the ingest
tasks look it up by settings); the live collection is read through the same store
handle (the embedded engine admits one per folder) with its own embedding service,
held here (:func:`live_runtime`). Only :func:`publish_rebuild` is not a task: its
artifacts belong to the flow run. The order is the runner's
(:func:`kbsync.maintenance.rebuild_runner.run_rebuild`), through
``flows.rebuild_executor.PrefectRebuildExecutor``.
"""

from __future__ import annotations

import threading
from typing import Any

from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from kbsync.eval import run as ev
from kbsync.ingest.report import artifact_key
from kbsync.maintenance import rebuild as rb
from kbsync.maintenance import rebuild_steps as steps
from kbsync.maintenance.rebuild_steps import RebuildRuntime
from kbsync.settings import Settings
from tasks.options import COMMON
from tasks.rebuild_story import rebuild_markdown
from tasks.refusals import refused
from tasks.resources import runtime_for

_lock = threading.Lock()
_live: dict[str, RebuildRuntime] = {}


def live_runtime(live: Settings, shadow: Settings) -> RebuildRuntime:
    """The live collection's runtime, on the shadow runtime's store (made once)."""
    with _lock:
        runtime = _live.get(live.collection)
        if runtime is None:
            runtime = _live[live.collection] = steps.live_runtime(live, runtime_for(shadow))
        return runtime


def release_live(live: Settings) -> None:
    """Close and forget the live runtime (its store stays open: the shadow's runtime owns it)."""
    with _lock:
        runtime = _live.pop(live.collection, None)
    if runtime is not None:
        runtime.close()


def _runtime(which: str, live: Settings, shadow: Settings) -> RebuildRuntime:
    return runtime_for(shadow) if which == "shadow" else live_runtime(live, shadow)


@task(name="evaluate-collection", task_run_name="evaluate-{which}", **COMMON)
def evaluate_collection(queries: list[ev.EvalQuery], specs: list[ev.ModeSpec], which: str,
                        live: Settings, shadow: Settings, *, namespace: str,
                        k: int) -> dict[str, Any]:
    """Evaluate one collection (``which``: live or shadow) on the queries
    (:func:`kbsync.maintenance.rebuild_steps.evaluate_collection`)."""
    return steps.evaluate_collection(queries, specs, _runtime(which, live, shadow),
                                     namespace=namespace, k=k)


@task(name="check-before-build", task_run_name="check-before-build", **COMMON)
def check_before_build(plan: rb.RebuildPlan, queries: list[ev.EvalQuery], live: Settings,
                       shadow: Settings, *, namespace: str) -> rb.RebuildPlan:
    """Refuse before anything is built
    (:func:`kbsync.maintenance.rebuild_steps.check_before_build`); a refusal ends the task
    ``Refused`` and the flow logs it once (:mod:`tasks.refusals`)."""
    try:
        return steps.check_before_build(plan, queries, live_runtime(live, shadow),
                                        namespace=namespace)
    except Exception as exc:  # noqa: BLE001 - refused() raises anything but a refusal
        return refused(exc)  # type: ignore[return-value]


@task(name="prepare-shadow", task_run_name="prepare-shadow", **COMMON)
def prepare_shadow(plan: rb.RebuildPlan, shadow: Settings, run_id: str) -> rb.RebuildPlan:
    """Resume or discard a leftover shadow; record the build settings in it."""
    return rb.prepare_shadow(plan, runtime_for(shadow).store, run_id=run_id)


@task(name="state-check", task_run_name="state-check", **COMMON)
def state_check(plan: rb.RebuildPlan, live: Settings, shadow: Settings) -> dict[str, Any]:
    """Does the shadow's state match the shares (see :func:`kbsync.maintenance.rebuild.state_check`)."""
    return rb.state_check(plan, runtime_for(shadow), live_runtime(live, shadow))


@task(name="swap", task_run_name="swap", **COMMON)
def swap(plan: rb.RebuildPlan, target: Settings, shadow: Settings) -> dict[str, Any]:
    """Point the logical collection at the shadow (alias or pointer file)."""
    return rb.swap(plan, target, runtime_for(shadow).store)


@task(name="discard-shadow", task_run_name="discard-shadow", **COMMON)
def discard(plan: rb.RebuildPlan, shadow: Settings) -> None:
    """Drop a shadow the gate refused (the live collection is not touched)."""
    rb.discard(runtime_for(shadow).store, plan.shadow)


def publish_rebuild(report: dict) -> None:
    """Table and Markdown artifacts of the decision (keys stable per namespace)."""
    ns = report["namespace"]
    decision = report["decision"]
    rows = [{"mode": mode, "live_ndcg@10": m["live"], "shadow_ndcg@10": m["shadow"],
             "delta": m["delta"], "ok": m["ok"]} for mode, m in decision["modes"].items()]
    create_table_artifact(key=artifact_key("kbsync-rebuild", ns), table=rows,
                          description=f"kbsync rebuild of {report['plan']['logical']}: "
                                      f"nDCG@10 live vs shadow, namespace {ns}")
    create_markdown_artifact(key=artifact_key("kbsync-rebuild-summary", ns),
                             markdown=rebuild_markdown(report),
                             description=f"kbsync rebuild decision, namespace {ns}")
