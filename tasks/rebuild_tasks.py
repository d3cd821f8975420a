"""The rebuild's steps as Prefect tasks: thin wrappers over :mod:`kbsync.maintenance.rebuild`.

The shadow's runtime is the process-wide one of :mod:`tasks.resources` (the ingest
tasks look it up by settings); the live collection is read through the same store
handle (the embedded engine admits one per folder) with its own embedding service,
held here (:func:`live_runtime`). Only :func:`publish_rebuild` is not a task: its
artifacts belong to the flow run.
"""

from __future__ import annotations

import threading
from typing import Any

from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from kbsync.runtime import Runtime
from kbsync.maintenance import rebuild as rb
from kbsync.maintenance import rebuild_checks as checks
from kbsync.eval import run as ev
from kbsync.ingest.report import artifact_key
from kbsync.catalog.state import StateStore
from kbsync.settings import Settings
from tasks.options import COMMON
from tasks.rebuild_story import rebuild_markdown
from tasks.resources import runtime_for

_lock = threading.Lock()
_live: dict[str, Runtime] = {}


class _Borrowed:
    """The shadow runtime's store, lent to the live runtime: closing it is the owner's job."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def close(self) -> None:
        """Nothing: the shadow's runtime closes the store."""


def live_runtime(live: Settings, shadow: Settings) -> Runtime:
    """The live collection's runtime, on the shadow runtime's store (opened once)."""
    from kbsync.embed import build_embedding_service

    with _lock:
        runtime = _live.get(live.collection)
        if runtime is None:
            owner = runtime_for(shadow)
            store = _Borrowed(owner.store)
            runtime = _live[live.collection] = Runtime(
                settings=live, store=store, states=StateStore(store, live.state_collection),
                service=build_embedding_service(live), chunk_config=owner.chunk_config)
        return runtime


def release_live(live: Settings) -> None:
    """Forget the live runtime (its store stays open: the shadow's runtime owns it)."""
    with _lock:
        _live.pop(live.collection, None)


def _runtime(which: str, live: Settings, shadow: Settings) -> Runtime:
    return runtime_for(shadow) if which == "shadow" else live_runtime(live, shadow)


@task(name="evaluate-collection", task_run_name="evaluate-{which}", **COMMON)
def evaluate_collection(queries: list[ev.EvalQuery], specs: list[ev.ModeSpec], which: str,
                        live: Settings, shadow: Settings, *, namespace: str, k: int) -> dict:
    """Evaluate one collection (``which``: live or shadow) on the queries, with the
    evaluate flow's metrics (:mod:`kbsync.eval.run`).

    The evaluate sequence's steps (:mod:`kbsync.eval.sequence`), not its
    :func:`~kbsync.eval.sequence.run_evaluation`, on purpose: the flow loads the queries
    and parses the modes once for both collections; no chat model is handed (an expanding
    mode is refused by ``run_mode``); the runtimes stay open until the flow releases them;
    and there is no report or regression gate: the rebuild's decision compares live with
    shadow (:func:`kbsync.maintenance.rebuild.decide`) instead of a collection with its
    history.
    """
    runtime = _runtime(which, live, shadow)
    warnings = ev.labels_in(queries, runtime, namespace)
    outcomes = []
    for spec in specs:  # one after the other: latencies measured without competition
        outcomes += ev.run_mode(queries, spec, runtime=runtime, namespace=namespace, k=k)
    result = ev.build_result(queries, outcomes, k=k, namespace=namespace, warnings=warnings,
                             embedding=runtime.embedding_info())
    data = result.to_dict()
    data["collection"] = runtime.collection
    return data


@task(name="check-before-build", task_run_name="check-before-build", **COMMON)
def check_before_build(plan: rb.RebuildPlan, queries: list[ev.EvalQuery], live: Settings,
                       shadow: Settings, *, namespace: str) -> rb.RebuildPlan:
    """Refuse before anything is built: a gate that can measure nothing, a root whose share
    lacks its live documents (:mod:`kbsync.maintenance.rebuild_checks`). Fills in the live
    collection's build settings when nothing recorded them."""
    runtime = live_runtime(live, shadow)
    checks.check_measurable(queries, set(runtime.states.load(namespace)), namespace=namespace,
                            collection=live.collection)
    checks.guard_roots(plan, runtime)
    if not plan.live_build:
        plan.live_build = checks.infer_live_build(
            live, runtime.states, list(plan.roots),
            lambda settings: _fingerprint_of(settings, runtime))
    return plan


def _fingerprint_of(settings: Settings, runtime: Runtime) -> str:
    """The base fingerprint of documents built with ``settings`` (on ``runtime``'s embedder)."""
    from kbsync.text.chunk import chunk_budget

    service = runtime.service
    config = chunk_budget(service.input_fit() if service else None,
                          tokens=settings.chunk_tokens, overlap=settings.chunk_overlap,
                          contextual=settings.contextual_text, fit_chunks=settings.chunk_fit)
    return Runtime(settings=settings, store=runtime.store, states=runtime.states,
                   service=service, chunk_config=config).fingerprint


@task(name="prepare-shadow", task_run_name="prepare-shadow", **COMMON)
def prepare_shadow(plan: rb.RebuildPlan, shadow: Settings, run_id: str) -> rb.RebuildPlan:
    """Resume or discard a leftover shadow; record the build settings in it."""
    return rb.prepare_shadow(plan, runtime_for(shadow).store, run_id=run_id)


@task(name="state-check", task_run_name="state-check", **COMMON)
def state_check(plan: rb.RebuildPlan, live: Settings, shadow: Settings) -> dict:
    """Does the shadow's state match the shares (see :func:`kbsync.maintenance.rebuild.state_check`)."""
    return rb.state_check(plan, runtime_for(shadow), live_runtime(live, shadow))


@task(name="swap", task_run_name="swap", **COMMON)
def swap(plan: rb.RebuildPlan, target: Settings, shadow: Settings) -> dict:
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
