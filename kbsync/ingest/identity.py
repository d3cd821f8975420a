"""What a store is bound to: which path each root NAME stands for, which embedder built it.

Both live as meta records in the state collection (see :data:`kbsync.ingest.state.META_KEY`),
so they travel with the store like the document records do.

**Root bindings.** In each namespace a root NAME is bound to the resolved path it was
first synced from. A run that brings the same NAME from another path is refused with
:class:`~kbsync.errors.RootConflict` before anything is written (the second share would
overwrite the first one's documents, and full mode would delete the rest), unless the
run says the share moved (``rebind``): then the NAME is bound to the new path and the
documents stay (their doc_ids do not change). A store written before bindings existed
has none: the binding is inferred from one of the root's document records (its file
path minus its relative path) and recorded on the next real run.

**Overlaps across runs.** A root whose folder (symlinks resolved) is, holds or lies inside
the folder of a root bound under another NAME in the namespace is refused too: its files
would be indexed twice under two doc_ids. With ``rebind`` the new root replaces the old
one: the old root is removed (:func:`kbsync.ingest.remove.remove`) before the run writes.
A new NAME under which ``kbsync.api`` texts are stored (``NAME/...``) is refused, and so is
a root inside ``KBSYNC_HOME``. Interrupted removals of the namespace are finished first.

**Embedder identity.** A chunk collection records the embedding provider, model,
dimension and sparse-encoder version it was built with. Ingest, search (and so ask,
eval and the Python API) refuse another configured embedder with
:class:`~kbsync.errors.EmbedderMismatch`: vectors of two models are not comparable even
when their dimensions agree. The sparse encoder is not configured: a collection keeps
the one it records (:func:`sparse_encoder`), for writes and queries alike, until it is
rebuilt. A collection built before the record existed adopts the configured embedder
on its next ingest, with a warning, and the legacy sparse encoder its points were made
with; search on it is not checked.

Every check is one keyword-index lookup in the state collection, never a scroll of the
documents. Checks write nothing; :func:`record_run` writes what :func:`check_run` found
missing (callers skip it on dry runs).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from kbsync.errors import EmbedderMismatch, RootConflict
from kbsync.models import RootSpec, display_path
from kbsync.text.sparse import CURRENT, LEGACY, SPARSE_VERSION, SparseEncoder, encoder_for
from kbsync.ingest import remove as removal
from kbsync.ingest.overlap import overlapping_bindings
from kbsync.ingest.remove import ROOT_BINDING
from kbsync.ingest.state import StateStore, utc_now

log = logging.getLogger(__name__)

EMBEDDER = "embedder"
RESERVED_ROOTS = ("<api>",)  # kbsync.api's pseudo-root: a directory root must not take it
REBIND_HINT = "--rebind (flow parameter rebind=true)"
CHANGE_MODEL_HINT = ("set KBSYNC_EMBED_PROVIDER/KBSYNC_EMBED_MODEL back to the store's; to "
                     "change models run `kbsync rebuild --queries FILE` (a shadow collection "
                     "swapped in behind an evaluation gate), or build a new collection with "
                     "KBSYNC_COLLECTION=<new name> and ingest there (README, Rebuilds)")


# -- embedder identity ------------------------------------------------------------------------
@dataclass(frozen=True)
class EmbedderIdentity:
    """What shapes the stored vectors: provider, model, dense dimension, sparse encoder."""

    provider: str
    model: str
    dimension: int
    sparse: str = SPARSE_VERSION

    def describe(self) -> str:
        """``provider/model (N dims, sparse V)``, as error messages show it."""
        return f"{self.provider}/{self.model} ({self.dimension} dims, sparse {self.sparse})"

    def to_payload(self) -> dict:
        """The meta record's fields."""
        return {"provider": self.provider, "model": self.model, "dimension": self.dimension,
                "sparse": self.sparse}

    @classmethod
    def from_payload(cls, payload: dict) -> "EmbedderIdentity":
        """Inverse of :meth:`to_payload`."""
        return cls(provider=str(payload["provider"]), model=str(payload["model"]),
                   dimension=int(payload["dimension"]), sparse=str(payload["sparse"]))


def stored_embedder(states: StateStore) -> EmbedderIdentity | None:
    """The embedder the collection records, or ``None`` (new store, or one from before
    the record existed)."""
    records = states.read_meta(EMBEDDER)
    return EmbedderIdentity.from_payload(records[0]) if records else None


def check_embedder(states: StateStore, service, *, collection: str) -> EmbedderIdentity | None:
    """Refuse a configured embedder that differs from the one ``collection`` was built with.

    Provider and model are compared before the dimension, so a mismatch is found
    without asking the service for its dimension (which may load a model or call an
    API).

    Returns:
        The stored identity, or ``None`` when the collection records none.
    Raises:
        EmbedderMismatch: provider, model, dimension or sparse encoder differ.
    """
    stored = stored_embedder(states)
    if stored is None:
        return None
    if (stored.provider, stored.model) != (service.provider, service.model) or \
            stored.dimension != service.dimension:
        configured = EmbedderIdentity(service.provider, service.model, service.dimension,
                                      sparse=stored.sparse)
        raise EmbedderMismatch(
            f"collection {collection} was built with {stored.describe()}, but the configured "
            f"embedder is {configured.describe()}; {CHANGE_MODEL_HINT}")
    encoder_for(stored.sparse)  # a version this release does not know is refused
    return stored


def sparse_encoder(states: StateStore, store, collection: str) -> SparseEncoder:
    """The sparse encoder ``collection`` is written and queried with.

    The recorded one; for a collection that records none, the legacy encoder when it
    holds points (they were made before the record existed) and the current one when
    it is new or empty.

    Raises:
        UsageError: the recorded version is unknown to this release.
    """
    return _encoder_of(stored_embedder(states), store, collection)


def _encoder_of(stored: EmbedderIdentity | None, store, collection: str) -> SparseEncoder:
    if stored is not None:
        return encoder_for(stored.sparse)
    return LEGACY if store.count(collection) else CURRENT


def check_query_embedder(store, service, *, collection: str) -> SparseEncoder:
    """:func:`check_embedder` for the query side, which knows only the chunk collection.

    The state collection's name follows :attr:`kbsync.settings.Settings.state_collection`.

    Returns:
        The collection's sparse encoder (:func:`sparse_encoder`), to encode the query.
    """
    # A search must not wait a batch's retries for the dimension probe of a dead endpoint:
    # probed here within the query budget, check_embedder then reads the known value.
    service.query_dimension()
    stored = check_embedder(StateStore(store, f"{collection}_state"), service,
                            collection=collection)
    return _encoder_of(stored, store, collection)  # the record read once per search


# -- root bindings ------------------------------------------------------------------------------
@dataclass(frozen=True)
class RootBinding:
    """Root ``name`` of ``namespace`` stands for the directory ``path`` (resolved, as text)."""

    namespace: str
    name: str
    path: str


def check_roots(roots: Sequence[RootSpec], *, home: Path) -> None:
    """Checks that need no store: reserved or repeated names, overlapping roots, and a
    root holding ``KBSYNC_HOME`` (it would index the store's own files).

    Raises:
        RootConflict: any of these.
    """
    home = Path(home).expanduser().resolve()
    seen: dict[str, RootSpec] = {}
    for spec in roots:
        if spec.name in RESERVED_ROOTS:
            raise RootConflict(f"root name {spec.name} is reserved for kbsync.api texts; "
                               f"choose another with NAME=PATH")
        if spec.name in seen:
            raise RootConflict(f"two roots are named {spec.name} ({display_path(seen[spec.name].path)}"
                               f" and {display_path(spec.path)}); use NAME=PATH to tell them apart")
        seen[spec.name] = spec
        if home == spec.path or spec.path in home.parents:
            raise RootConflict(
                f"root {spec.name} ({display_path(spec.path)}) contains KBSYNC_HOME ({display_path(home)}): "
                "kbsync would index its own store; sync a folder that does not hold it, or "
                "move KBSYNC_HOME out of the share")
        if home in spec.path.parents:
            raise RootConflict(
                f"root {spec.name} ({display_path(spec.path)}) is inside KBSYNC_HOME "
                f"({display_path(home)}): kbsync would index its own store's files; sync a "
                "folder outside it")
    for i, first in enumerate(roots):
        for second in roots[i + 1:]:
            inner, outer = sorted((first, second), key=lambda s: len(s.path.parts), reverse=True)
            if inner.path == outer.path or outer.path in inner.path.parents:
                raise RootConflict(
                    f"roots {outer.name} ({display_path(outer.path)}) and {inner.name} "
                    f"({display_path(inner.path)}) overlap: their files would be indexed twice under "
                    "two names; sync one of them")


def _bindings(states: StateStore, namespace: str) -> dict[str, str]:
    """Root name -> bound path text, for one namespace (one index lookup)."""
    return {r["root"]: r["path"]
            for r in states.read_meta(ROOT_BINDING, bound_namespace=namespace)}


def bound_roots(states: StateStore, namespace: str) -> set[str]:
    """The root NAMEs bound in ``namespace`` (one index lookup)."""
    return set(_bindings(states, namespace))


def _check_api_texts(states: StateStore, namespace: str, spec: RootSpec) -> None:
    """Refuse a new root NAME under which ``kbsync.api`` texts are stored (``NAME/...``):
    its files' documents would silently replace them (once, when the NAME is first bound)."""
    prefix = spec.name + "/"
    texts = sorted(d for d in states.load(namespace, RESERVED_ROOTS[0]) if d.startswith(prefix))
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


def check_run(roots: Sequence[RootSpec], *, runtime, namespace: str,
              rebind: bool = False) -> IdentityPlan:
    """Every identity check of an ingest (or ``add_text``), before anything is written.

    Call it under the write lock, before the plan and before ``ensure_collection``
    (whose dimension check would otherwise answer first, less clearly).

    Raises:
        RootConflict: see :func:`check_roots`; a NAME bound to another path, or a
            path overlapping another NAME's bound path
            (:func:`kbsync.ingest.overlap.overlapping_bindings`), without ``rebind``.
        EmbedderMismatch: see :func:`check_embedder`.
    """
    check_roots(roots, home=runtime.config.home)
    settings = getattr(runtime, "settings", None)
    if settings is not None:  # a rebuild may have swapped while this run waited for the lock
        from kbsync.ingest.active import check_still_active

        check_still_active(settings, runtime.store)
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
    bound = _bindings(states, namespace) if roots else {}
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


def record_run(plan: IdentityPlan, *, runtime, run_id: str) -> None:
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


def _check_pending_removals(runtime, namespace: str, plan: IdentityPlan) -> None:
    """Interrupted removals of the namespace: this run finishes them (a dry run says so)."""
    for target in removal.pending(runtime.store, state_collection=runtime.config.state_collection,
                                  namespace=namespace):
        plan.pending_removals.append(target.root or removal.WHOLE_NAMESPACE)
        plan.warnings.append(f"an interrupted `kbsync remove` of {target.describe()} is "
                             "finished before this run writes")


def _remove_before_binding(plan: IdentityPlan, runtime) -> None:
    config = runtime.config
    names = dict(collection=config.collection, state_collection=config.state_collection)
    removal.finish_pending(runtime.store, namespace=plan.namespace, **names)
    for name in plan.superseded:
        removal.remove(runtime.store, target=removal.Target(plan.namespace, name), **names)
