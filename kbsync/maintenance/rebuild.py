"""Eval-gated rebuilds: build a shadow collection, evaluate it beside the live one, swap.

The rules of ``kbsync rebuild``, without Prefect; the one order they run in, and where
the locks go, is :func:`kbsync.maintenance.rebuild_runner.run_rebuild` (the ``rebuild``
flow's and the plain call's):

1. :func:`plan_rebuild` names the live collection (what the logical name serves from
   now), the shadow ``<logical>__r<N>`` and the shares to build it from: every root
   binding of every namespace of the live collection (the pointer is per collection,
   so the shadow must hold all of them).
2. :func:`prepare_shadow` resumes a shadow a crashed rebuild left with the same build
   settings (the ingest's own state makes that incremental) and discards any other
   leftover. The live collection is never written by a rebuild.
3. Before anything is built, :mod:`kbsync.maintenance.rebuild_checks` refuses a root whose share
   lacks its live documents (full mode's mass-delete guard, against the live collection)
   and a gate whose queries find none of their relevant documents.
   The runner ingests every root into the shadow with the new settings (the embedding
   cache serves texts that did not change, keyed by model and text), evaluates both
   collections on the same queries, and then, under the live collection's write lock,
   replays what syncs changed meanwhile (a full-mode ingest of the same roots), checks
   that the shadow's state matches the shares (:func:`state_check`), decides
   (:func:`decide`) and swaps (:func:`swap`) or discards the shadow.
4. After a swap the old live collection is kept as *previous* for :func:`rollback`,
   until the next swap drops it; it keeps the build settings it was made with, and a
   ``kbsync remove`` applies to it too. :func:`restore` points the logical name at a
   named collection again (a lost pointer).

Locks (decided once, by the runner's ``lock_scope``): on the embedded engine (one writer
per folder) the rebuild holds the store's write lock from before it opens the store until
after it closes it, so a sync waits for the whole rebuild or is refused at once; on a
server only the replay and swap hold the live collection's lock (syncs write the live
collection meanwhile).

Crash safety: nothing a rebuild does touches the live collection's points or
document records (the swap only adds its build record when it had none); the only step that changes what search serves is the pointer swap, which
is atomic (:mod:`kbsync.store.active`). A crash before it leaves the live
collection serving and the shadow resumable or discardable by the next rebuild.

Limit: documents without a bound root (``kbsync.api.add_text`` texts) cannot be
rebuilt from files; a live collection holding them fails the state check.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from kbsync.errors import StoreUnavailable, UsageError
from kbsync.maintenance.rebuild_checks import REBUILD_DELETE_HINT, gate_of, gated_mean, mass_missing
from kbsync.catalog import active
from kbsync.ingest.discover import parse_root
from kbsync.catalog.identity import ROOT_BINDING, stored_embedder
from kbsync.ingest.plan import DeleteGuard, plan_root
from kbsync.catalog.lock import WriteLocks
from kbsync.catalog.state import StateStore, utc_now
from kbsync.models import RootSpec, SyncMode
from kbsync.settings import EmbedProvider, Settings
from kbsync.ingest.context import IngestContext
from kbsync.store import active as pointer
from kbsync.store.base import VectorStore

log = logging.getLogger(__name__)

NDCG = "ndcg@10"


@dataclass
class RebuildPlan:
    """What one rebuild works on (names are physical collections)."""

    logical: str
    live: str
    shadow: str
    previous: str | None
    roots: dict[str, list[str]]  # namespace -> root arguments NAME=PATH
    live_build: dict[str, Any]
    target_build: dict[str, Any]
    resumed: bool = False
    discarded: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)

    def root_specs(self, namespace: str) -> list[RootSpec]:
        """The roots of ``namespace``, parsed."""
        return [parse_root(r) for r in self.roots[namespace]]


def existing_collections(settings: Settings) -> list[str]:
    """The store's collection names, without opening an embedded store (a folder listing;
    the embedded engine admits one process, and the rebuild's own open comes after)."""
    return active.collection_names(settings)


@runtime_checkable
class WritableStore(Protocol):
    """What a rebuild needs beside :class:`~kbsync.store.base.VectorStore`: list and drop
    collections. Both adapters have it; a store the embedded engine opened read-only (a
    relay to the process holding the folder) does not."""

    def collection_names(self) -> list[str]:
        """Every collection's name."""

    def drop_collection(self, name: str) -> None:
        """Drop ``name`` (nothing when it does not exist)."""


def writable(store: VectorStore) -> WritableStore:
    """``store``, as one that lists and drops collections.

    Raises:
        StoreUnavailable: the embedded store opened read-only (another process holds the
            folder: the rebuild holds the write lock, so a reader that held it briefly).
    """
    if not isinstance(store, WritableStore):
        raise StoreUnavailable("the embedded store is held by another process, so the "
                               "rebuild could open it only read-only; run it again")
    return store


def writable_names(store: VectorStore) -> list[str]:
    """The collection names of the store the rebuild writes.

    Raises:
        StoreUnavailable: see :func:`writable`.
    """
    return writable(store).collection_names()


def choose_shadow(logical: str, names: list[str], record: pointer.ActiveRecord | None) -> str:
    """The shadow's name: the newest leftover generation (to resume or discard), else the
    next one. Never the active or the previous collection."""
    keep = {logical} | ({record.active, record.previous or ""} if record else set())
    leftovers = [n for n in names if pointer.is_generation_of(logical, n) and n not in keep]
    if leftovers:
        return max(leftovers, key=lambda n: int(n.rsplit("__r", 1)[1]))
    return pointer.shadow_name(logical, names)


def live_settings(resolved: Settings, store: VectorStore) -> Settings:
    """The settings that query the live collection: its own embedder (from its identity
    record), whatever the environment now says.

    Raises:
        UsageError: the live collection records no embedder (made by an older kbsync).
    """
    identity = stored_embedder(StateStore(store, resolved.state_collection))
    if identity is None:
        raise UsageError(f"collection {resolved.collection} records no embedder: run "
                         "`kbsync ingest` once (it adopts the configured one), then rebuild")
    update: dict[str, Any] = {"embed_provider": EmbedProvider(identity.provider),
                              "embed_model": identity.model}
    same = (resolved.embed_provider.value, resolved.embed_model_name()) == (
        identity.provider, identity.model)
    if identity.provider == EmbedProvider.HASH.value:
        update["embed_dimensions"] = identity.dimension  # the hash model's only setting
    elif identity.provider == EmbedProvider.LOCAL.value:
        update["embed_dimensions"] = None  # a local model has one size
    elif not same:  # an endpoint model: ask for the size the collection was built with
        update["embed_dimensions"] = identity.dimension
    return resolved.model_copy(update=update)


def bound_roots(states: StateStore) -> dict[str, list[str]]:
    """namespace -> ``NAME=PATH`` of every root binding of the collection."""
    roots: dict[str, list[str]] = {}
    for record in states.read_meta(ROOT_BINDING):
        roots.setdefault(record["bound_namespace"], []).append(f"{record['root']}={record['path']}")
    return {ns: sorted(specs) for ns, specs in sorted(roots.items())}


def plan_rebuild(target: Settings, live: Settings, shadow: str, store: VectorStore,
                 record: pointer.ActiveRecord | None) -> RebuildPlan:
    """The rebuild's plan (reads the live collection's bindings; writes nothing).

    Raises:
        UsageError: the live collection has no root bindings (nothing to rebuild from).
    """
    roots = bound_roots(StateStore(store, live.state_collection))
    if not roots:
        raise UsageError(f"collection {live.collection} has no bound roots to rebuild from "
                         "(ingest a share first)")
    # The pointer's record, else the collection's own build record; empty when it has
    # neither (never rebuilt): the runner then infers it (rebuild_checks.infer_live_build),
    # because ``live`` carries the rebuild's new chunk settings, not the live collection's.
    live_build = (dict(record.build) if record and record.build
                  else active.read_build(store, live.collection))
    return RebuildPlan(logical=target.logical_collection, live=live.collection, shadow=shadow,
                       previous=record.previous if record else None, roots=roots,
                       live_build=live_build, target_build=active.build_of(target))


def prepare_shadow(plan: RebuildPlan, store: VectorStore, *, run_id: str) -> RebuildPlan:
    """Resume the shadow when a crashed rebuild left it with the same build settings,
    else discard it; record the build settings in it. Never touches the live collection."""
    names = writable_names(store)
    if plan.shadow in names or Settings.state_collection_of(plan.shadow) in names:
        built = active.read_build(store, plan.shadow)
        if built == plan.target_build:
            plan.resumed = True
            log.info("resuming shadow collection %s left by an earlier rebuild", plan.shadow)
        else:
            discard(store, plan.shadow)
            plan.discarded.append(plan.shadow)
    active.write_build(store, plan.shadow, plan.target_build, run_id=run_id)
    return plan


def discard(store: VectorStore, name: str) -> None:
    """Drop a collection and its state collection (never the live one: callers check).

    Raises:
        StoreUnavailable: the store is read-only (see :func:`writable`).
    """
    admin = writable(store)
    for each in (name, Settings.state_collection_of(name)):
        admin.drop_collection(each)
    log.info("discarded collection %s", name)


def state_check(plan: RebuildPlan, shadow_rt: IngestContext,
                live_rt: IngestContext) -> dict[str, Any]:
    """Does the shadow's state match the shares and the LIVE collection? (writes nothing)

    It matches when a full-mode plan of every root against the shadow finds nothing
    changed or to delete, every file it would add also has no live record (it failed
    in both: the live collection has nothing better), no live document lies outside
    the rebuilt roots (``kbsync.api`` texts: the shadow could not have them), the live
    collection's root bindings are still the plan's (a ``kbsync remove`` meanwhile is
    not undone by the swap), and no root lost its live documents past full mode's
    mass-delete guard (``mass_delete``: a share unmounted during the rebuild; see
    :mod:`kbsync.maintenance.rebuild_checks`). A few live documents whose files are gone may
    be missing: full mode dropped them, as a full sync would.
    """
    pending: list[str] = []
    missing: list[str] = []
    mass: list[str] = []
    for ns in plan.roots:
        live_docs = live_rt.states.load(ns)
        shadow_docs = shadow_rt.states.load(ns)
        specs = plan.root_specs(ns)
        for spec in specs:
            rp = plan_root(spec, runtime=shadow_rt, namespace=ns, mode=SyncMode.FULL,
                           guard=DeleteGuard(allow_mass_delete=True))
            pending += [f"{ns}:{i.doc_id}" for i in rp.to_process()
                        if i.doc_id in live_docs or i.doc_id in shadow_docs]
            pending += [f"{ns}:{d}" for d in rp.to_delete]
            lost = mass_missing(list(live_docs), list(shadow_docs), spec.name)
            if lost:
                mass.append(f"{ns}:{spec.name} ({lost[0]} of {lost[1]} live documents)")
        prefixes = tuple(s.name + "/" for s in specs)
        missing += [f"{ns}:{d}" for d in live_docs
                    if d not in shadow_docs and not d.startswith(prefixes)]
    roots_changed = bound_roots(live_rt.states) != plan.roots
    return {"matches": not pending and not missing and not mass and not roots_changed,
            "pending": sorted(pending)[:20], "pending_count": len(pending),
            "missing": sorted(missing)[:20], "missing_count": len(missing),
            "mass_delete": mass, "roots_changed": roots_changed}


def decide(live: dict[str, Any], shadow: dict[str, Any], *, max_drop: float,
           state: dict[str, Any]) -> dict[str, Any]:
    """Swap only if no mode's nDCG@10 dropped by more than ``max_drop``, enough queries
    measured and the state matches. ``live``/``shadow``: the two evaluation results
    (``modes`` per mode; :func:`kbsync.maintenance.rebuild_steps.evaluate_collection`).

    The nDCG@10 compared is the mean over the measurable queries only
    (:func:`~kbsync.maintenance.rebuild_checks.gate_of`):
    a query none of whose relevant documents is live scores 0.0 on both sides, and
    averaging it in would dilute a real drop below ``max_drop``. Fewer measurable queries
    than :func:`kbsync.maintenance.rebuild_checks.required_measurable` refuse. The
    decision's ``gate`` says how many were measured and left out (``None`` for results
    without per-query scores, which are compared on their modes' means).
    """
    modes, reasons = {}, []
    gate = gate_of(live, shadow)
    if gate is not None and gate["measured"] < gate["minimum"]:
        reasons.append(f"too few measurable queries: {gate['measured']} of {gate['queries']} "
                       f"have a relevant document in the live collection, the gate needs at "
                       f"least {gate['minimum']}")
    for mode, metrics in live["modes"].items():
        if gate is None:
            before, after = metrics.get(NDCG), shadow["modes"].get(mode, {}).get(NDCG)
        else:
            before, after = (gated_mean(live, mode, gate["indexes"]),
                             gated_mean(shadow, mode, gate["indexes"]))
        if before is None or after is None:
            reasons.append(f"{mode}: no nDCG@10 (no labelled query found a relevant document)")
            modes[mode] = {"live": before, "shadow": after, "delta": None, "ok": False}
            continue
        delta = round(after - before, 6)
        ok = delta >= -max_drop - 1e-9
        modes[mode] = {"live": before, "shadow": after, "delta": delta, "ok": ok}
        if not ok:
            reasons.append(f"{mode}: nDCG@10 {after:.4f} on the shadow vs {before:.4f} live "
                           f"(drop {-delta:.4f} > max-drop {max_drop:g})")
    if state.get("mass_delete"):
        reasons.append("the shadow lacks most live documents of " + ", ".join(
            state["mass_delete"]) + " (is the share mounted?); " + REBUILD_DELETE_HINT)
    if state.get("roots_changed"):
        reasons.append("the live collection's roots changed during the rebuild (a `kbsync "
                       "remove` or a new root): run the rebuild again")
    if state["pending_count"] or state["missing_count"]:
        reasons.append(f"the shadow's state does not match the shares "
                       f"({state['pending_count']} documents pending, {state['missing_count']} "
                       "live documents missing)")
    if gate is not None:
        gate.pop("indexes")  # in the evaluations already; the decision keeps the counts
    return {"swap": not reasons, "max_drop": max_drop, "modes": modes, "reasons": reasons,
            "gate": gate}


def swap(plan: RebuildPlan, settings: Settings, store: VectorStore) -> dict[str, Any]:
    """Make the shadow active and the live collection previous, atomically; then drop the
    collection that was previous before (the only rollback target is the one just
    replaced). Returns the new pointer record as JSON."""
    record = pointer.ActiveRecord(plan.logical, plan.shadow, plan.live, dict(plan.target_build),
                                  dict(plan.live_build), utc_now())
    record = _write(record, settings, store)
    if not active.read_build(store, plan.live):
        # The one write a rebuild makes beside the live collection's points and records: the
        # settings it was built with, so a restore brings them back with it. After the
        # pointer, never before: a build record in the logical collection marks it replaced
        # (active.was_replaced), and a reader that saw the mark before the first pointer
        # existed was refused as if the pointer were lost. A crash between the two leaves a
        # pointer whose record holds these settings as previous_build (a rollback's source).
        active.write_build(store, plan.live, dict(plan.live_build), run_id="rebuild")
    old = plan.previous
    if old and old not in (plan.live, plan.shadow):
        discard(store, old)
    return asdict(record)


def rollback(settings: Settings, store: VectorStore | None = None) -> dict[str, Any]:
    """Serve the previous collection again (the active one becomes previous).

    ``store``: an open server store (aliases), or ``None`` (the embedded engine's
    pointer file needs none; a server store is opened for the call).

    Raises:
        UsageError: no rebuild swapped this collection, or it has no previous one.
    """
    if store is None and settings.qdrant_url:
        from kbsync.store import open_store

        with open_store(settings) as own:  # type: ignore[attr-defined]
            return rollback(settings, own)
    record = active.read_record(settings.model_copy(update={"active_of": None}), store)
    if record is None:
        active.refuse_if_orphaned(settings, store)  # a lost pointer: name --restore instead
    if record is None or record.previous is None:
        raise UsageError(f"collection {settings.logical_collection}: nothing to roll back to "
                         "(no rebuild has swapped it, or its previous collection is gone)")
    names = writable_names(store) if store is not None else existing_collections(settings)
    if record.previous not in names:
        raise UsageError(f"collection {settings.logical_collection}: the previous collection "
                         f"{record.previous} no longer exists")
    return asdict(_write(record.rolled_back(utc_now()), settings, store))


def restore(settings: Settings, name: str, store: VectorStore) -> dict[str, Any]:
    """Point the logical collection at ``name`` again (a lost or deleted pointer).

    ``name``: the logical collection itself or one of its generations
    ``<logical>__r<N>``; its build settings come from its own state record. The
    newest other generation left (or the logical collection) becomes previous, for a
    rollback. ``store``: the open store (the caller holds the write lock).

    Raises:
        UsageError: ``name`` is not one of the logical collection's, or does not exist.
    """
    logical = settings.logical_collection
    names = writable_names(store)
    if name != logical and not pointer.is_generation_of(logical, name):
        raise UsageError(f"--restore {name}: not a collection of {logical} (one of "
                         f"{', '.join(active.generations(logical, names)) or 'none'})")
    if name not in names:
        raise UsageError(f"--restore {name}: no such collection in the store (collections of "
                         f"{logical}: {', '.join(active.generations(logical, names)) or 'none'})")
    others = [n for n in active.generations(logical, names) if n != name]
    previous = others[-1] if others else None
    record = pointer.ActiveRecord(logical, name, previous, active.read_build(store, name),
                                  active.read_build(store, previous) if previous else {},
                                  utc_now())
    return asdict(_write(record, settings, store))


def _write(record: pointer.ActiveRecord, settings: Settings,
           store: VectorStore | None) -> pointer.ActiveRecord:
    """Point the logical name at ``record`` (aliases, or the pointer file and its copy with
    the next generation); the record as written."""
    client = getattr(store, "client", None)  # a server store's aliases; else the pointer file
    if client is not None:
        pointer.swap_aliases(client, record.logical, active=record.active,
                             previous=record.previous)
        return record
    record = replace(record, generation=pointer.next_generation(settings.home, record.logical))
    pointer.write_pointer(settings.home, record)
    return record


def rollback_locked(locks: WriteLocks, namespace: str = "default") -> dict[str, Any]:
    """:func:`rollback` under the write lock of ``namespace`` (``locks``: the front door's
    decision: the CLI's ``kbsync rebuild --rollback`` and the ``rollback`` flow both call
    this). Returns the new pointer record."""
    with locks.hold(namespace, "rollback"):
        return rollback(locks.settings)


def restore_locked(locks: WriteLocks, name: str, namespace: str = "default") -> dict[str, Any]:
    """:func:`restore` of ``name`` under the write lock of ``namespace`` (the CLI's
    ``kbsync rebuild --restore NAME`` and the ``restore`` flow). Returns the new pointer."""
    from kbsync.store import open_store

    with locks.hold(namespace, "restore"):
        # a writer: `kbsync serve` holding the store hands it over, and reads through this
        # process's relay meanwhile (kbsync.serve.holder)
        store = open_store(locks.settings, serve_readers=True)
        try:
            return restore(locks.settings, name, store)
        finally:
            store.close()


def serving_line(pointer_record: dict[str, Any]) -> str:
    """What a rollback or restore made the collection serve, as one line, without "kbsync
    serves from kbsync" when the original collection is back."""
    logical, now = pointer_record["logical"], pointer_record["active"]
    serving = (f"collection {logical} serves its original build" if now == logical
               else f"collection {logical} serves from {now}")
    previous = pointer_record.get("previous")
    return f"{serving} again" + (f" ({previous} kept for a rollback)" if previous else "")
