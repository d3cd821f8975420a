"""The ``rebuild`` flow: shadow collection -> evaluate shadow and live -> swap or refuse.

The flow only arranges; the rules live in :mod:`kbsync.maintenance.rebuild` (see its
docstring for the order and the crash-safety argument). The new settings are the
run's ``KBSYNC_*`` environment, with the ``build`` parameter on top (embedding
provider/model/dimensions, chunk budget/overlap, contextual text). Each ingest of
the shadow runs the ingest runner with its ``ingest-root`` subflows, so the run
graph shows every batch. A refused rebuild ends Completed named ``Refused`` with the
report as its result; the CLI exits 3 then.
"""

from __future__ import annotations

import time
from contextlib import ExitStack, nullcontext
from typing import Annotated, Any

from prefect import flow, get_run_logger, tags
from prefect.runtime import flow_run
from prefect.states import Completed
from pydantic import Field

from flows.executor import PrefectExecutor
from kbsync.maintenance import rebuild as rb
from kbsync.eval.run import check_k, load_queries, parse_modes
from kbsync.catalog import active
from kbsync.catalog.lock import ingest_lock_path
from kbsync.ingest.model_choice import rebuild_model
from kbsync.ingest.runner import IngestRequest, run_ingest
from kbsync.ingest.summary import new_run_id
from kbsync.models import SyncMode
from kbsync.settings import Settings, load_settings
from tasks import rebuild_tasks as t
from tasks.locking import run_lock
from tasks.resources import release, runtime_for
from tasks.run_names import rebuild_run_name
from tasks.watchdog import FLOW_HOOKS, start_flow_watch


class _Shadow(PrefectExecutor):
    """The shadow's executor: its write lock names the rebuild to refused writers."""

    def write_lock(self, namespace: str):
        """The shadow's lock (on the embedded store: the one lock of the store)."""
        return run_lock(self.settings, namespace, purpose="rebuild")


class _Unlocked(PrefectExecutor):
    """The shadow's executor while the rebuild holds the live collection's write lock
    (one lock file covers the embedded store: taking it again would wait on ourselves)."""

    def write_lock(self, namespace: str):
        """No lock: the caller holds the live collection's (see the class docstring)."""
        return nullcontext()


@flow(name="rebuild", flow_run_name=rebuild_run_name, log_prints=False, validate_parameters=True, **FLOW_HOOKS)
def rebuild(
    queries_file: Annotated[str, Field(min_length=1)],
    namespace: Annotated[str, Field(min_length=1, max_length=200)] = "default",
    max_drop: Annotated[float, Field(ge=0, le=1)] = 0.02,
    modes: Annotated[list[str], Field(min_length=1)] = ["dense", "hybrid"],  # noqa: B006
    k: Annotated[int, Field(ge=1, le=100)] = 10,
    build: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Rebuild the collection with new settings in a shadow; swap it in only if it is no worse.

    Args:
        queries_file: JSONL or CSV labelled queries (as for evaluate), run on the shadow and the live collection.
        namespace: Namespace the queries are evaluated in (every namespace of the collection is rebuilt).
        max_drop: Largest allowed drop of nDCG@10 (any mode) of the shadow against the live collection.
        modes: Retrieval modes to compare (dense, hybrid); each must pass.
        k: Documents ranked per query (nDCG is always @10).
        build: New settings over the environment: embed_provider, embed_model, embed_dimensions, chunk_tokens, chunk_overlap, chunk_fit, contextual_text.
    """  # noqa: E501 - one line per parameter keeps Prefect's docstring parser exact
    logger = get_run_logger()
    started = time.perf_counter()
    target = active.apply_build(load_settings(), _checked_build(build))
    start_flow_watch(target)
    queries, specs = load_queries(queries_file), parse_modes(modes)
    check_k(k)
    run_id = str(flow_run.get_id() or new_run_id())
    timings: dict[str, float] = {}
    with _whole_rebuild_lock(target, namespace):
        record = active.read_record(target)
        # An unnamed model means the collection's own when the language rule chose it.
        target = rebuild_model(target, record, _checked_build(build))
        shadow_name = rb.choose_shadow(target.logical_collection,
                                       rb.existing_collections(target), record)
        shadow = target.model_copy(update={"collection": shadow_name, "active_of": None})
        live: Settings | None = None
        try:
            store = runtime_for(shadow).store  # opened first: it serves readers meanwhile
            live = rb.live_settings(active.resolve(target, store, warn=False), store)
            plan = rb.plan_rebuild(target, live, shadow_name, store, record)
            plan = t.check_before_build(plan, queries, live, shadow, namespace=namespace)
            plan = t.prepare_shadow(plan, shadow, run_id)
            logger.info("rebuild %s: live %s, shadow %s%s, roots %s", plan.logical, plan.live,
                        plan.shadow, " (resumed)" if plan.resumed else "", plan.roots)
            whole = not target.qdrant_url
            mark = time.perf_counter()
            builds = _ingest_all(plan, _Unlocked(shadow) if whole else _Shadow(shadow), run_id,
                                 "shadow")
            timings["build_s"] = round(time.perf_counter() - mark, 3)
            mark = time.perf_counter()
            evals = {which: t.evaluate_collection(queries, specs, which, live, shadow,
                                                  namespace=namespace, k=k)
                     for which in ("live", "shadow")}
            timings["eval_s"] = round(time.perf_counter() - mark, 3)
            mark = time.perf_counter()
            # Syncs of the live collection wait from here on (on the embedded store they
            # have waited since the start: _whole_rebuild_lock).
            with nullcontext() if whole else _live_locks(live, plan):
                replay = _ingest_all(plan, _Unlocked(shadow), run_id, "replay")
                state = t.state_check(plan, live, shadow)
                decision = rb.decide(evals["live"], evals["shadow"], max_drop=max_drop,
                                     state=state)
                pointer = t.swap(plan, target, shadow) if decision["swap"] else None
            if pointer is None:
                t.discard(plan, shadow)
            timings["swap_s"] = round(time.perf_counter() - mark, 3)
        finally:
            if live is not None:
                t.release_live(live)
            release(shadow)  # closed before the lock goes: a waiting sync then opens it
    report = {"namespace": namespace, "swapped": pointer is not None, "plan": plan.to_dict(),
              "live": evals["live"], "shadow": evals["shadow"], "decision": decision,
              "state": state, "pointer": pointer, "ingest": builds, "replay": replay,
              "timings": timings, "duration_s": round(time.perf_counter() - started, 3)}
    t.publish_rebuild(report)
    logger.info("rebuild %s: %s", plan.logical, "swapped to " + plan.shadow if pointer
                else "refused: " + "; ".join(decision["reasons"]))
    if pointer is None:
        # A flow may return a State to set its final state (Prefect resolves it at run time);
        # Prefect's types take the annotation as the only return type.
        return Completed(data=report, name="Refused",  # type: ignore[return-value]
                         message="; ".join(decision["reasons"]))
    return report


def _checked_build(build: dict[str, Any] | None) -> dict[str, Any]:
    unknown = sorted(set(build or {}) - set(active.BUILD_FIELDS))
    if unknown:
        from kbsync.errors import UsageError

        raise UsageError(f"build: unknown settings {unknown}; allowed: "
                         f"{', '.join(active.BUILD_FIELDS)}")
    return dict(build or {})


def _ingest_all(plan: rb.RebuildPlan, executor: PrefectExecutor, run_id: str,
                tag: str) -> dict:
    """A full-mode ingest of every bound root into the shadow, per namespace (summaries).

    Its ``ingest-root-*`` subflows carry ``tag`` (``shadow``: the build; ``replay``: the
    changes synced after it) and ``namespace:NS``, so the UI tells them from live syncs.
    """
    out = {}
    for ns in plan.roots:
        request = IngestRequest(roots=tuple(plan.root_specs(ns)), namespace=ns,
                                mode=SyncMode.FULL, run_id=run_id)
        with tags(tag, f"namespace:{ns}"):
            out[ns] = run_ingest(request, executor).to_dict()
    return out


def _whole_rebuild_lock(target: Settings, namespace: str):
    """The embedded store's one write lock, held from before the store is opened until
    after it is closed: a sync waits for the whole rebuild (build, replay, swap) or is
    refused at once, and a rebuild during an ingest is refused with ``LockHeld`` before
    it opens anything. On a server, syncs write the live collection while the shadow is
    built (see :func:`_live_locks`), so nothing is held here."""
    if target.qdrant_url:
        return nullcontext()
    return run_lock(target, namespace, purpose="rebuild")


def _live_locks(live: Settings, plan: rb.RebuildPlan) -> ExitStack:
    """The live collection's write lock of every namespace (one on the embedded store)."""
    stack, taken = ExitStack(), set()
    for ns in plan.roots:
        path = ingest_lock_path(live, ns)
        if path not in taken:
            taken.add(path)
            stack.enter_context(run_lock(live, ns, purpose="rebuild"))
    return stack
