"""The rebuild's steps that need a runtime, as plain functions (no Prefect).

:mod:`kbsync.maintenance.rebuild_runner` decides what runs and in which order; its two
executors run these: the plain one (:mod:`kbsync.maintenance.rebuild_plain`) calls them
at once, the Prefect one (``tasks.rebuild_tasks``) wraps each in a task. The pure
rules (plan, state check, decision, swap) live in :mod:`kbsync.maintenance.rebuild`.

Runtimes: the shadow's runtime owns the one store handle (the embedded engine admits one
per folder); the live collection is read through :func:`live_runtime`, a runtime on that
same store (:class:`Borrowed`: its ``close`` leaves the store open) with the live
collection's own embedding service. A runtime is ``kbsync.runtime.Runtime`` (a
dataclass above this wing): :func:`derive` builds another one on the same collaborators
without importing it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, Sequence

from kbsync.catalog.state import StateStore
from kbsync.eval import run as ev
from kbsync.ingest.context import RunContext
from kbsync.maintenance import rebuild_checks as checks
from kbsync.maintenance.rebuild import RebuildPlan
from kbsync.settings import Settings
from kbsync.store.base import VectorStore


class RebuildRuntime(RunContext, Protocol):
    """What a rebuild step needs of a runtime (:class:`kbsync.runtime.Runtime` is one):
    an ingest's collaborators, the embedding model it describes, and ``close``."""

    def embedding_info(self) -> dict:
        """Provider, model and dimension of the embedding service."""

    def close(self) -> None:
        """Release the store handle and stop the conversion workers."""


class Borrowed:
    """A store lent to another runtime: every call goes to ``store``; ``close`` does
    nothing, because the lender (the shadow's runtime) closes it."""

    def __init__(self, store: VectorStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def close(self) -> None:
        """Nothing: the lender closes the store."""


def derive(runtime: RebuildRuntime, **changes: Any) -> RebuildRuntime:
    """A runtime like ``runtime`` with ``changes`` (settings, store, states, service,
    chunk_config); its config and converters follow the new settings."""
    # Runtime is a dataclass: replace() runs its __post_init__ again on the new fields.
    derived: RebuildRuntime = dataclasses.replace(runtime, **changes)  # type: ignore[type-var]
    return derived


def live_runtime(live: Settings, owner: RebuildRuntime) -> RebuildRuntime:
    """The live collection's runtime: ``owner``'s store (borrowed), the live collection's
    state records and its own embedding service (the model it was built with)."""
    from kbsync.embed import build_embedding_service

    store = Borrowed(owner.store)
    return derive(owner, settings=live, store=store,
                  states=StateStore(store, live.state_collection),
                  service=build_embedding_service(live))


def fingerprint_of(settings: Settings, runtime: RebuildRuntime) -> str:
    """The base fingerprint of documents built with ``settings`` on ``runtime``'s embedder."""
    from kbsync.text.chunk import chunk_budget

    service = runtime.service
    config = chunk_budget(service.input_fit() if service else None,
                          tokens=settings.chunk_tokens, overlap=settings.chunk_overlap,
                          contextual=settings.contextual_text, fit_chunks=settings.chunk_fit)
    return derive(runtime, settings=settings, chunk_config=config).fingerprint


def check_before_build(plan: RebuildPlan, queries: Sequence[ev.EvalQuery],
                       live_rt: RebuildRuntime, *, namespace: str) -> RebuildPlan:
    """Refuse before anything is built: a gate with too few measurable queries, a root whose
    share lacks its live documents (:mod:`kbsync.maintenance.rebuild_checks`). Fills in the
    live collection's build settings when nothing recorded them. Writes nothing.

    Raises:
        UsageError: fewer than :func:`~kbsync.maintenance.rebuild_checks.required_measurable`
            queries have a relevant document in ``namespace`` of the live collection.
        MassDeleteRefused: a bound root's share lacks most of its live documents.
    """
    checks.check_measurable(queries, set(live_rt.states.load(namespace)), namespace=namespace,
                            collection=live_rt.settings.collection)
    checks.guard_roots(plan, live_rt)
    if not plan.live_build:
        plan.live_build = checks.infer_live_build(
            live_rt.settings, live_rt.states, list(plan.roots),
            lambda settings: fingerprint_of(settings, live_rt))
    return plan


def evaluate_collection(queries: Sequence[ev.EvalQuery], specs: Sequence[ev.ModeSpec],
                        runtime: RebuildRuntime, *, namespace: str, k: int) -> dict[str, Any]:
    """Evaluate one collection on the queries, with the evaluate flow's metrics
    (:mod:`kbsync.eval.run`); the result's JSON with the ``collection`` it measured.

    The evaluate sequence's steps (:mod:`kbsync.eval.sequence`), not its
    :func:`~kbsync.eval.sequence.run_evaluation`, on purpose: the runner loads the queries
    and parses the modes once for both collections; no chat model is handed (an expanding
    mode is refused by ``run_mode``); the runtimes stay open until the runner releases
    them; and there is no report or regression gate: the rebuild's decision compares live
    with shadow (:func:`kbsync.maintenance.rebuild.decide`) instead of a collection with
    its history.

    Beside the evaluate flow's result, two fields for the gate: ``measurable`` (indexes of
    the queries with a relevant document in this collection's ``namespace``;
    :func:`~kbsync.maintenance.rebuild_checks.measurable`) and ``ndcg_per_query`` (per
    mode, each query's nDCG@10 in the queries' order, ``None`` when unlabelled). The
    decision compares both collections on the LIVE result's ``measurable`` queries.
    """
    known = set(runtime.states.load(namespace))
    warnings = ev.check_labels(queries, known, namespace)
    outcomes: list[ev.QueryOutcome] = []
    for spec in specs:  # one after the other: latencies measured without competition
        outcomes += ev.run_mode(queries, spec, runtime=runtime, namespace=namespace, k=k)
    result = ev.build_result(queries, outcomes, k=k, namespace=namespace, warnings=warnings,
                             embedding=runtime.embedding_info())
    data = result.to_dict()
    data["collection"] = runtime.collection
    data["measurable"] = checks.measurable(queries, known)
    data["ndcg_per_query"] = {spec.name: [o.ndcg10 for o in outcomes if o.mode == spec.name]
                              for spec in specs}
    return data
