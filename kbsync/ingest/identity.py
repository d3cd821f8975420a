"""A run's identity check: the store's bindings and embedder against the run, and what to
record. The records and the checks that need no run live in :mod:`kbsync.catalog.identity`.

**Root bindings.** A run that brings a bound root NAME from another path is refused with
:class:`~kbsync.errors.RootConflict` before anything is written, unless the run says the
share moved (``rebind``): then the NAME is bound to the new path and the documents stay.
A store written before bindings existed has none: the binding is inferred from one of the
root's document records and recorded on the next real run.

**Overlaps across runs.** A root whose folder is, holds or lies inside the folder of a
root bound under another NAME is refused too; with ``rebind`` the new root replaces the
old one, which is removed (:func:`kbsync.ingest.remove.remove`) before the run writes.
Interrupted removals of the namespace are finished first.

:func:`check_run` writes nothing; :func:`record_run` writes what it found missing (callers
skip it on dry runs).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Sequence

from kbsync.catalog.identity import (CHANGE_MODEL_HINT, EMBEDDER, RESERVED_ROOTS, ROOT_BINDING,
                                     EmbedderIdentity, RootBinding, bindings, check_embedder,
                                     check_roots)
from kbsync.catalog.overlap import overlapping_bindings
from kbsync.catalog.state import StateStore, utc_now
from kbsync.errors import RootConflict
from kbsync.ingest import remove as removal
from kbsync.ingest.context import IngestContext
from kbsync.models import RootSpec, display_path, name_key

log = logging.getLogger(__name__)

REBIND_HINT = "--rebind (flow parameter rebind=true)"


# -- a run's identity check -------------------------------------------------------------------
@dataclass
class IdentityPlan:
    """What :func:`check_run` found: records to write (unless dry run) and warnings."""

    embedder: EmbedderIdentity | None = None  # to record: the collection has none yet
    bindings: list[RootBinding] = field(default_factory=list)  # new or rebound
    warnings: list[str] = field(default_factory=list)
    namespace: str = "default"
    superseded: list[str] = field(default_factory=list)  # bound roots a --rebind root replaces
    pending_removals: list[str] = field(default_factory=list)  # interrupted `kbsync remove`s


def check_run(roots: Sequence[RootSpec], *, runtime: IngestContext, namespace: str,
              rebind: bool = False) -> IdentityPlan:
    """Every identity check of an ingest (or ``add_text``), before anything is written.

    Call it under the write lock, before the plan and before ``ensure_collection``
    (whose dimension check would otherwise answer first, less clearly).

    Raises:
        RootConflict: see :func:`kbsync.catalog.identity.check_roots`; a NAME bound to
            another path, or a path overlapping another NAME's bound path
            (:func:`kbsync.catalog.overlap.overlapping_bindings`), without ``rebind``.
        EmbedderMismatch: see :func:`kbsync.catalog.identity.check_embedder`.
    """
    check_roots(roots, home=runtime.config.home)
    runtime.check_still_active()  # a rebuild may have swapped while this run waited for the lock
    plan = IdentityPlan(namespace=namespace)
    states, service = runtime.states, runtime.service
    if check_embedder(states, service, collection=runtime.collection) is None:
        plan.embedder = EmbedderIdentity(service.provider, service.model, service.dimension,
                                         sparse=runtime.sparse.version)
        if runtime.store.count(runtime.collection):
            plan.warnings.append(
                f"collection {runtime.collection} records no embedder (made by an older "
                f"kbsync): adopting the configured {plan.embedder.describe()}; if it was "
                f"built with another one, {CHANGE_MODEL_HINT}")
    bound = bindings(states, namespace) if roots else {}
    for spec in roots:
        _check_name(spec, bound, states, namespace, rebind, plan)
    _check_overlaps(roots, bound, namespace, rebind, plan)
    _check_pending_removals(runtime, namespace, plan)
    for warning in plan.warnings:
        log.warning("%s", warning)
    return plan


def _check_name(spec: RootSpec, bound: dict[str, str], states: StateStore, namespace: str,
                rebind: bool, plan: IdentityPlan) -> None:
    """The NAME's own binding: new, the same path, or (with ``rebind``) a moved share."""
    path = display_path(spec.path)
    previous, legacy = bound.get(spec.name), False
    if previous is None:
        previous, legacy = _legacy_path(states, namespace, spec.name), True
    if previous == path and not legacy:
        return
    if previous is not None and previous != path:
        if not rebind:
            raise _conflict(spec.name, namespace, previous, path, legacy=legacy)
        plan.warnings.append(f"root {spec.name} rebound from {previous} to {path}")
    if previous is None:
        _check_api_texts(states, namespace, spec)
    plan.bindings.append(RootBinding(namespace, spec.name, path))


def record_run(plan: IdentityPlan, *, runtime: IngestContext, run_id: str) -> None:
    """Write the records :func:`check_run` found missing (never on a dry run).

    Interrupted removals of the namespace are finished first, then the roots a
    ``--rebind`` root replaces are removed (each through :func:`kbsync.ingest.remove.remove`,
    so a crash in between is finished by the next run or ``kbsync verify --repair``).
    """
    if plan.pending_removals or plan.superseded:
        _remove_before_binding(plan, runtime)
    if plan.embedder is not None:
        runtime.states.write_meta(EMBEDDER, (), {**plan.embedder.to_payload(),
                                                  "collection": runtime.collection,
                                                  "recorded_at": utc_now(), "run_id": run_id})
    for b in plan.bindings:
        runtime.states.write_meta(ROOT_BINDING, (b.namespace, b.name), {
            "bound_namespace": b.namespace, "root": b.name, "path": b.path,
            "bound_at": utc_now(), "run_id": run_id})


# -- roots overlapping the roots already bound ------------------------------------------------
def _check_overlaps(roots: Sequence[RootSpec], bound: dict[str, str], namespace: str,
                    rebind: bool, plan: IdentityPlan) -> None:
    """Refuse a root that overlaps a root bound under another NAME, unless ``rebind``:
    then this root replaces it (its documents are removed, the files indexed again here)."""
    in_run = {spec.name for spec in roots}
    for spec in roots:
        others = {n: p for n, p in bound.items() if n not in in_run}
        for name, path in overlapping_bindings(spec, others):
            shown = display_path(spec.path)
            if not rebind:
                raise RootConflict(
                    f"root {spec.name} ({shown}) overlaps root {name} ({path}), already bound "
                    f"in namespace {namespace}: their files would be indexed twice under two "
                    f"names; ingest {name} again, `kbsync remove --root {name}` first, or pass "
                    f"{REBIND_HINT} to replace {name} by {spec.name} (its documents are removed)")
            if name not in plan.superseded:
                plan.superseded.append(name)
                plan.warnings.append(f"root {spec.name} ({shown}) replaces the overlapping root "
                                     f"{name} ({path}): {name}'s documents are removed")


def _check_pending_removals(runtime: IngestContext, namespace: str, plan: IdentityPlan) -> None:
    """Interrupted removals of the namespace: this run finishes them (a dry run says so)."""
    for target in removal.pending(runtime.store, state_collection=runtime.config.state_collection,
                                  namespace=namespace):
        plan.pending_removals.append(target.root or removal.WHOLE_NAMESPACE)
        plan.warnings.append(f"an interrupted `kbsync remove` of {target.describe()} is "
                             "finished before this run writes")


def _remove_before_binding(plan: IdentityPlan, runtime: IngestContext) -> None:
    config = runtime.config
    names = dict(collection=config.collection, state_collection=config.state_collection)
    removal.finish_pending(runtime.store, namespace=plan.namespace, **names)
    for name in plan.superseded:
        removal.remove(runtime.store, target=removal.Target(plan.namespace, name), **names)


def _check_api_texts(states: StateStore, namespace: str, spec: RootSpec) -> None:
    """Refuse a new root NAME under which ``kbsync.api`` texts are stored (``NAME/...``):
    its files' documents would silently replace them (once, when the NAME is first bound)."""
    prefix, key = spec.name + "/", name_key(spec.name)  # ``Notes`` would shadow ``notes/...``
    texts = sorted(d for d in states.load(namespace, RESERVED_ROOTS[0])
                   if "/" in d and name_key(d.partition("/")[0]) == key)
    if texts:
        raise RootConflict(
            f"root name {spec.name} in namespace {namespace} would replace {len(texts)} texts "
            f"stored through kbsync.api under {prefix} (e.g. {texts[0]}); give this share "
            f"another name ({spec.name}2={display_path(spec.path)}), or delete those texts")


def _legacy_path(states: StateStore, namespace: str, name: str) -> str | None:
    """The root path of a store without bindings, read off one of its document records."""
    record = states.any_record(namespace, name)
    if record is None:
        return None
    rel = record.doc_id[len(name) + 1:]
    if record.doc_id.startswith(name + "/") and rel and record.path.endswith("/" + rel):
        return record.path[:-len(rel) - 1]
    return None  # an odd record (e.g. written by hand): bind the root as given


def _conflict(name: str, namespace: str, bound: str, new: str, *, legacy: bool) -> RootConflict:
    source = "holds documents synced from" if legacy else "is bound to"
    return RootConflict(
        f"root name {name} in namespace {namespace} {source} {bound}, not {new}: give this "
        f"share another name ({name}2={new}), or pass {REBIND_HINT} if {bound} really moved "
        f"to {new} (its documents keep their doc_ids)")
