"""The one rebuild sequence: :func:`run_rebuild` decides *what* runs and in which order;
a :class:`RebuildExecutor` decides *where* (as the ingest runner and the evaluate
sequence do).

    check build, modes, k, queries (usage errors, before any lock)
    -> [store lock] name the shadow -> open it -> plan -> check before build -> prepare
    -> build (a full-mode shadow ingest per namespace) -> evaluate live, then shadow
    -> [live locks] replay (the same ingest again) -> state check -> gate (decide)
    -> swap, or discard the shadow -> release -> the report

The lock scope is decided here, once (:func:`lock_scope`): on the embedded engine (one
writer per folder) the store's write lock is held from before the store is opened until
after it is closed, so a sync waits for the whole rebuild or is refused at once, and a
rebuild during an ingest is refused with ``LockHeld`` before it opens anything; the
shadow's ingests then take no lock of their own (one lock file covers the store: taking
it again would wait on ourselves). On a server, syncs write the live collection while
the shadow is built under its own lock; the live collection's locks (one per distinct
lock of the plan's namespaces) are held around replay, state check, gate and swap.
Whether a lock includes the distributed one is the front door's decision, not the
runner's nor an executor's: each executor holds the :class:`~kbsync.catalog.lock.WriteLocks`
its door gave it (``rebuild_plain``'s caller, or the flow's
:func:`tasks.locking.flow_locks`), for each collection through :func:`locks_for`.

Two executors: :class:`kbsync.maintenance.rebuild_plain.InProcess` calls each step at
once (tests, scripts); ``flows.rebuild_executor.PrefectRebuildExecutor`` runs each as a
Prefect task of the ``rebuild`` flow and each shadow ingest through the ingest flow's
executor (its ``ingest-root`` subflows). Both get the same calls, so the flow and the
plain call cannot drift. What only a flow does (artifacts, the ``Refused`` state) stays
in the flow. Tested by ``tests/maintenance/test_rebuild_runner.py`` (in process) and
``tests/flows/test_rebuild_runner_prefect.py`` (Prefect).
"""

from __future__ import annotations

import logging
import time
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Mapping, Protocol, Sequence

from pydantic import BaseModel, ConfigDict, Field

from kbsync.catalog import active
from kbsync.catalog.lock import WriteLocks, ingest_lock_path
from kbsync.errors import UsageError
from kbsync.eval.queries import EvalQuery
from kbsync.eval.run import ModeSpec, check_k, load_queries, parse_modes
from kbsync.ingest.executor import Executor
from kbsync.ingest.model_choice import rebuild_model
from kbsync.ingest.runner import IngestRequest, run_ingest
from kbsync.ingest.summary import new_run_id
from kbsync.maintenance import rebuild as rb
from kbsync.models import SyncMode
from kbsync.settings import MAX_TOKENS, EmbedProvider, Settings
from kbsync.store.base import VectorStore

log = logging.getLogger(__name__)

LockScope = Literal["store", "live"]
"""``store``: the whole store's write lock for the whole rebuild (embedded engine);
``live``: the live collection's locks around replay and swap (a server)."""

DEFAULT_MAX_DROP = 0.02
"""The gate's default largest nDCG@10 drop (the flow's, the CLI's and the request's)."""

TIMINGS = ("build_s", "eval_s", "swap_s")
"""The report's ``timings`` keys: build, both evaluations, replay + check + swap."""


@dataclass(frozen=True)
class RebuildRequest:
    """One rebuild: what the ``rebuild`` flow's parameters name, as values.

    Attributes:
        settings: the run's settings (its ``KBSYNC_*`` environment); ``build`` on top are
            the new ones the shadow is built with.
        queries_file: JSONL or CSV labelled queries, run on the shadow and the live collection.
        namespace: the namespace the queries are evaluated in (every one is rebuilt).
        max_drop: the largest allowed nDCG@10 drop of the shadow, any mode (0..1).
        modes: retrieval modes compared; each must pass.
        k: documents ranked per query (nDCG is always @10).
        build: new settings over ``settings`` (:data:`kbsync.catalog.active.BUILD_FIELDS`), a
            dict or a :class:`BuildSettings` (the flow's typed parameter).
        run_id: recorded with the shadow's documents and build record.
    """

    settings: Settings
    queries_file: str | Path
    namespace: str = "default"
    max_drop: float = DEFAULT_MAX_DROP
    modes: Sequence[str] = ("dense", "hybrid")
    k: int = 10
    build: BuildSettings | Mapping[str, Any] = field(default_factory=dict)
    run_id: str = field(default_factory=new_run_id)


class RebuildExecutor(Protocol):
    """Runs the steps of :func:`run_rebuild`.

    Limits: the live collection is never written (the swap adds its build record only
    when it had none); the shadow's runtime owns the one store handle from
    :meth:`open_shadow` until :meth:`release`, and the live collection is read through
    it. Every step but :meth:`swap` and :meth:`discard` writes the shadow or nothing, so
    a retried step converges. Tested through both executors (see the module doc).
    """

    def write_lock(self, settings: Settings, namespace: str) -> AbstractContextManager:
        """The write lock of ``settings``' collection and ``namespace``, held for a rebuild
        (a refused writer is told so): the door's :class:`~kbsync.catalog.lock.WriteLocks`
        the executor was given, through :func:`locks_for`; an executor decides nothing."""

    def open_shadow(self, shadow: Settings) -> VectorStore:
        """Open the shadow's runtime; its store (the live collection is read through it;
        on the embedded engine it serves other processes' reads meanwhile)."""

    def check_before_build(self, plan: rb.RebuildPlan, queries: list[EvalQuery],
                           live: Settings, shadow: Settings, *,
                           namespace: str) -> rb.RebuildPlan:
        """:func:`kbsync.maintenance.rebuild_steps.check_before_build` on the live runtime."""

    def prepare_shadow(self, plan: rb.RebuildPlan, shadow: Settings,
                       run_id: str) -> rb.RebuildPlan:
        """:func:`kbsync.maintenance.rebuild.prepare_shadow` on the shadow's store."""

    def shadow_ingest(self, shadow: Settings, *, locked: bool,
                      tags: tuple[str, ...]) -> AbstractContextManager[Executor]:
        """An ingest executor writing the shadow, for one :func:`run_ingest`; ``locked``:
        its runs take the shadow's write lock; ``tags`` name the runs (``shadow`` or
        ``replay``, ``namespace:NS``)."""

    def evaluate(self, queries: list[EvalQuery], specs: list[ModeSpec],
                 which: str, live: Settings, shadow: Settings, *,
                 namespace: str, k: int) -> dict[str, Any]:
        """:func:`kbsync.maintenance.rebuild_steps.evaluate_collection` of one collection
        (``which``: ``live`` or ``shadow``)."""

    def state_check(self, plan: rb.RebuildPlan, live: Settings,
                    shadow: Settings) -> dict[str, Any]:
        """:func:`kbsync.maintenance.rebuild.state_check` (writes nothing)."""

    def swap(self, plan: rb.RebuildPlan, target: Settings, shadow: Settings) -> dict[str, Any]:
        """:func:`kbsync.maintenance.rebuild.swap`: the new pointer record."""

    def discard(self, plan: rb.RebuildPlan, shadow: Settings) -> None:
        """Drop the shadow the gate refused (:func:`kbsync.maintenance.rebuild.discard`)."""

    def release(self, live: Settings | None, shadow: Settings) -> None:
        """Close the live and the shadow runtimes (the store last), before the lock goes:
        a waiting sync then opens the store."""


class BuildSettings(BaseModel):
    """The settings the shadow collection is built with; an empty field keeps the
    worker's KBSYNC_* value."""

    # The rebuild flow's typed ``build`` parameter: the Prefect form shows one sub-field each
    # (this docstring is the form's text). :func:`checked_build` turns it into the plain dict
    # the runner takes; the fields are kbsync.catalog.active.BUILD_FIELDS.

    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "examples": [{"chunk_tokens": 200}, {"embed_model": "multilingual-e5-small"},
                     {"chunk_tokens": 300, "contextual_text": False}]})

    chunk_tokens: int | None = Field(
        None, ge=16, le=MAX_TOKENS, examples=[200],
        description="Token budget per chunk (KBSYNC_CHUNK_TOKENS); empty = the worker's "
                    "(unset there: the embedding model's input limit).")
    embed_model: str | None = Field(
        None, min_length=1, examples=["multilingual-e5-small"],
        description="Embedding model (KBSYNC_EMBED_MODEL), e.g. multilingual-e5-small; "
                    "empty = the worker's.")
    contextual_text: bool | None = Field(
        None, description="Embed each chunk with its document title and heading path in "
                          "front (KBSYNC_CONTEXTUAL_TEXT); empty = the worker's.")
    embed_provider: EmbedProvider | None = Field(
        None, description="local | hash | openai (KBSYNC_EMBED_PROVIDER); empty = the worker's.")
    embed_dimensions: int | None = Field(
        None, ge=1, le=MAX_TOKENS,
        description="Embedding output dimension (KBSYNC_EMBED_DIMENSIONS); empty = the worker's.")
    chunk_overlap: int | None = Field(
        None, ge=0, le=MAX_TOKENS,
        description="Overlap in tokens between chunks (KBSYNC_CHUNK_OVERLAP); empty = the "
                    "worker's.")
    chunk_fit: bool | None = Field(
        None, description="Fit every chunk to the model's input limit in its own tokenizer "
                          "(KBSYNC_CHUNK_FIT); empty = the worker's.")


def checked_build(build: BuildSettings | Mapping[str, Any] | None) -> dict[str, Any]:
    """``build`` as a dict (a :class:`BuildSettings`: its fields that are set, not None).

    Raises:
        UsageError: a key that is not a build setting.
    """
    if isinstance(build, BuildSettings):
        return build.model_dump(mode="json", exclude_none=True)
    unknown = sorted(set(build or {}) - set(active.BUILD_FIELDS))
    if unknown:
        raise UsageError(f"build: unknown settings {unknown}; allowed: "
                         f"{', '.join(active.BUILD_FIELDS)}")
    return dict(build or {})


def target_settings(settings: Settings,
                    build: BuildSettings | Mapping[str, Any] | None) -> Settings:
    """The new settings: ``settings`` with ``build`` in force (see :func:`checked_build`)."""
    return active.apply_build(settings, checked_build(build))


def locks_for(locks: WriteLocks, settings: Settings) -> WriteLocks:
    """The door's decision ``locks`` held for another collection of the rebuild (the
    target, the shadow or the live one): the same distributed lock, or none, for the
    lock of ``settings``' collection. Executors call this; it decides nothing."""
    return replace(locks, settings=settings)


def lock_scope(settings: Settings) -> LockScope:
    """Where the rebuild's write locks go (see the module doc): ``store`` on the embedded
    engine, ``live`` on a Qdrant server."""
    return "live" if settings.qdrant_url else "store"


def run_rebuild(request: RebuildRequest, executor: RebuildExecutor) -> dict[str, Any]:
    """The whole rebuild (see the module doc for the order and the locks).

    Returns:
        The report: ``namespace``, ``swapped``, ``plan``, ``live`` and ``shadow`` (the two
        evaluations), ``decision``, ``state``, ``pointer`` (None when refused), ``ingest``
        and ``replay`` (summaries per namespace), ``timings`` (:data:`TIMINGS`) and
        ``duration_s``. A refusal by the gate is a report with ``swapped`` False, not an
        exception.

    Raises:
        UsageError: an unknown build setting, bad modes or k, a bad query file, a live
            collection without an embedder record or bound roots, or a gate that could
            measure nothing.
        LockHeld: another writer holds the lock (an ingest, on the embedded engine).
        MassDeleteRefused: a bound root's share lacks most of its live documents.
    """
    started = time.perf_counter()
    build = checked_build(request.build)
    specs = parse_modes(request.modes)  # usage errors before any lock
    check_k(request.k)
    queries = load_queries(str(request.queries_file))
    target = active.apply_build(request.settings, build)
    scope = lock_scope(target)
    ns = request.namespace
    timings: dict[str, float] = {}
    with executor.write_lock(target, ns) if scope == "store" else nullcontext():
        record = active.read_record(target)
        # An unnamed model means the collection's own when the language rule chose it.
        target = rebuild_model(target, record, build)
        shadow_name = rb.choose_shadow(target.logical_collection,
                                       rb.existing_collections(target), record)
        shadow = target.model_copy(update={"collection": shadow_name, "active_of": None})
        live: Settings | None = None
        try:
            store = executor.open_shadow(shadow)  # opened first: it serves readers meanwhile
            live = rb.live_settings(active.resolve(target, store, warn=False), store)
            plan = rb.plan_rebuild(target, live, shadow_name, store, record)
            plan = executor.check_before_build(plan, queries, live, shadow, namespace=ns)
            plan = executor.prepare_shadow(plan, shadow, request.run_id)
            log.info("rebuild %s: live %s, shadow %s%s, roots %s", plan.logical, plan.live,
                     plan.shadow, " (resumed)" if plan.resumed else "", plan.roots)
            mark = time.perf_counter()
            builds = _ingest_all(executor, plan, shadow, request.run_id, "shadow",
                                 locked=scope == "live")
            timings["build_s"] = _since(mark)
            mark = time.perf_counter()
            evals = {which: executor.evaluate(queries, specs, which, live, shadow,
                                              namespace=ns, k=request.k)
                     for which in ("live", "shadow")}
            timings["eval_s"] = _since(mark)
            mark = time.perf_counter()
            # Syncs of the live collection wait from here on (on the embedded store they
            # have waited since the start).
            with _live_locks(executor, live, plan) if scope == "live" else nullcontext():
                replay = _ingest_all(executor, plan, shadow, request.run_id, "replay",
                                     locked=False)
                state = executor.state_check(plan, live, shadow)
                decision = rb.decide(evals["live"], evals["shadow"], max_drop=request.max_drop,
                                     state=state)
                pointer = executor.swap(plan, target, shadow) if decision["swap"] else None
            if pointer is None:
                executor.discard(plan, shadow)
            timings["swap_s"] = _since(mark)
        finally:
            executor.release(live, shadow)  # before the lock goes
    log.info("rebuild %s: %s", plan.logical, "swapped to " + plan.shadow if pointer
             else "refused: " + "; ".join(decision["reasons"]))
    return {"namespace": ns, "swapped": pointer is not None, "plan": plan.to_dict(),
            "live": evals["live"], "shadow": evals["shadow"], "decision": decision,
            "state": state, "pointer": pointer, "ingest": builds, "replay": replay,
            "timings": timings, "duration_s": _since(started)}


def _since(mark: float) -> float:
    return round(time.perf_counter() - mark, 3)


def _ingest_all(executor: RebuildExecutor, plan: rb.RebuildPlan, shadow: Settings, run_id: str,
                tag: str, *, locked: bool) -> dict[str, dict]:
    """A full-mode ingest of every bound root into the shadow, per namespace (summaries).

    ``tag``: ``shadow`` (the build) or ``replay`` (the changes synced after it), with
    ``namespace:NS``, so a run's record tells them from live syncs.
    """
    out = {}
    for ns in plan.roots:
        request = IngestRequest(roots=tuple(plan.root_specs(ns)), namespace=ns,
                                mode=SyncMode.FULL, run_id=run_id)
        with executor.shadow_ingest(shadow, locked=locked,
                                    tags=(tag, f"namespace:{ns}")) as ingest:
            out[ns] = run_ingest(request, ingest).to_dict()
    return out


def _live_locks(executor: RebuildExecutor, live: Settings, plan: rb.RebuildPlan) -> ExitStack:
    """The live collection's write lock of every namespace of the plan, each distinct lock
    once (several namespaces may share one lock file)."""
    stack, taken = ExitStack(), set()
    try:
        for ns in plan.roots:
            path = ingest_lock_path(live, ns)
            if path not in taken:
                taken.add(path)
                stack.enter_context(executor.write_lock(live, ns))
    except BaseException:
        stack.close()  # the locks taken so far go with the refusal
        raise
    return stack
