"""Planning a root: discovery diffed against the stored state, with full mode's
mass-delete guard. Writes nothing."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Sequence

from kbsync.errors import ErrorCode, MassDeleteRefused
from kbsync.ingest.discover import Discovery, discover
from kbsync.ingest.classify import Plan, PlanItem, plan_files
from kbsync.ingest.context import IngestContext
from kbsync.catalog.checks import StoreCheck, check_root, damaged_documents
from kbsync.models import PlanAction, RootSpec, SyncMode, display_path

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeleteGuard:
    """Limits on what full mode may delete from one root."""

    allow_mass_delete: bool = False
    max_delete_fraction: float = 0.5


@dataclass
class RootPlan:
    """A root's discovery, its plan, and the documents the run deletes (``to_delete``:
    in full mode those whose file is gone; in any mode those reached through a link that
    now leads out of the root, :func:`_deletable`).

    ``discovery.files`` is emptied once the plan is made (:func:`plan_root`): every file
    is then in ``plan`` (with its hash) or in ``plan.failures``, and the run holds one
    record a file, not two. ``discovery.ignored`` and ``problems`` stay."""

    root: RootSpec
    discovery: Discovery
    plan: Plan
    to_delete: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # recorded documents discovery could not read (kept, never deleted) and those now
    # reached through a link that leads out of the root (deleted in every mode)
    kept_unreadable: list[str] = field(default_factory=list)
    escaped: list[str] = field(default_factory=list)

    def to_process(self) -> list:
        """New and changed items, in doc_id order."""
        return self.plan.of(PlanAction.NEW) + self.plan.of(PlanAction.CHANGED)


def plan_root(
    root: RootSpec, *, runtime: IngestContext, namespace: str, mode: SyncMode, force: bool = False,
    include: Sequence[str] = (), exclude: Sequence[str] = (), guard: DeleteGuard = DeleteGuard(),
) -> RootPlan:
    """Discover ``root`` and diff it against the stored state. Writes nothing.

    The root's chunk count is checked against its records (one exact count,
    :func:`kbsync.catalog.checks.check_root`); when they differ, the points of each of
    its documents are counted, and those whose count differs from the record
    are planned ``changed`` with ``repair=True`` (counted in ``repaired``). Recorded
    documents discovery could not read are kept (``kept_unreadable``), never deleted.

    Raises:
        MassDeleteRefused: full mode would empty the root or delete more than
            ``guard.max_delete_fraction`` of its documents without
            ``guard.allow_mass_delete``.
    """
    found = discover(root, accept=runtime.accepts, include=include, exclude=exclude)
    states = runtime.states.load(namespace, root.name)
    check = check_root(runtime.store, runtime.collection, namespace, root.name, states)
    damaged = ([] if check.matches else
               damaged_documents(runtime.store, runtime.collection, namespace, states))
    plan = plan_files(found.files, states, fingerprint=runtime.fingerprint,
                      ocr_key=runtime.ocr_key, force=force, repair=frozenset(damaged))
    result = RootPlan(root=root, discovery=found, plan=plan)
    if not check.matches:
        _warn_drift(result, check, damaged)
    if not found.files and not found.ignored:
        result.warnings.append(f"root {root.name} ({display_path(root.path)}) holds no files")
    result.to_delete = _deletable(result, guard, len(states), mode)
    found.files = []  # the plan holds them now, hashed: a root's run keeps one copy, not two
    return result


def _warn_drift(result: RootPlan, check: StoreCheck, damaged: Sequence[str]) -> None:
    """The ``warnings`` of a root whose store and state disagree: what is rebuilt, what
    is not (no file to rebuild from, or points no record names) and what to run."""
    gone = sorted({i.doc_id for i in result.plan.of(PlanAction.MISSING)} & set(damaged))
    result.warnings.append(f"{check.describe()}; reprocessing {len(damaged) - len(gone)} "
                           "documents whose points differ")
    if gone:
        result.warnings.append(
            f"root {result.root.name}: {len(gone)} documents whose points no longer match "
            f"their state have no file to rebuild them from (kept as they are: "
            f"{', '.join(gone[:5])}{', ...' if len(gone) > 5 else ''}); see `kbsync verify`")
    elif not damaged and not result.plan.of(PlanAction.NEW):
        # No document explains the difference (new ones may: a crash before their commit).
        result.warnings.append(
            f"root {result.root.name}: the store holds points no state record names; "
            "`kbsync verify --repair` deletes them")


def preflight_root(
    root: RootSpec, *, runtime: IngestContext, namespace: str, include: Sequence[str] = (),
    exclude: Sequence[str] = (), guard: DeleteGuard = DeleteGuard(),
) -> int:
    """Check full mode's guard for ``root`` without hashing anything.

    Run for every root before any root is processed, so a refusal leaves the
    whole run without a single write.

    Returns:
        How many documents full mode would delete from the root.
    Raises:
        MassDeleteRefused: as :func:`plan_root`.
    """
    found = discover(root, accept=runtime.accepts, include=include, exclude=exclude, quiet=True)
    states = runtime.states.load(namespace, root.name)
    present = {f.doc_id for f in found.files}
    plan = Plan(items=[PlanItem(PlanAction.MISSING, None, s) for d, s in sorted(states.items())
                       if d not in present])
    return len(_deletable(RootPlan(root=root, discovery=found, plan=plan), guard, len(states),
                          SyncMode.FULL))


def _deletable(result: RootPlan, guard: DeleteGuard, known: int, mode: SyncMode) -> list[str]:
    """The doc_ids to delete from the root, and why the other missing ones stay.

    Invariant: a document is deleted only when discovery saw its file is gone (full
    mode, under the guard) or that its path now leads out of the root through a link (any
    mode: the share no longer holds it, and what the link leads to must not stay
    indexed). A document discovery could not read (an entry it could not stat, a folder
    it could not list or enter) is never deleted: it is kept and named in one warning.
    """
    escaped, unreadable, gone = triage_missing(result)
    result.escaped, result.kept_unreadable = escaped, unreadable
    if unreadable:
        result.warnings.append(
            f"root {result.root.name}: {len(unreadable)} documents could not be read and were "
            f"kept as indexed, not deleted: {_named(unreadable)}")
    if escaped:
        result.warnings.append(
            f"root {result.root.name}: {len(escaped)} documents now lead outside the root "
            f"through a link and are deleted from the index: {_named(escaped)}")
    if mode is not SyncMode.FULL:
        return escaped
    return sorted(escaped + _guarded(result, gone, guard, known))


def triage_missing(result: RootPlan) -> tuple[list[str], list[str], list[str]]:
    """The plan's missing doc_ids as (escaped, unreadable, gone), each in doc_id order.

    ``escaped``: at or under a link discovery found leading out of the root;
    ``unreadable``: at or under an entry discovery could not read; ``gone``: the rest,
    whose file discovery saw is not there (the only ones full mode may delete as missing).
    """
    kinds: dict[str, str] = {}
    for problem in result.discovery.problems:
        kind = "escaped" if problem.error == ErrorCode.SymlinkOutsideRoot else "unreadable"
        if kinds.get(problem.doc_id) != "unreadable":  # unreadable wins: it may be there
            kinds[problem.doc_id] = kind
    out: dict[str, list[str]] = {"escaped": [], "unreadable": [], "gone": []}
    for item in result.plan.of(PlanAction.MISSING):
        parts = item.doc_id.split("/")
        found = {kinds.get("/".join(parts[:n])) for n in range(1, len(parts) + 1)} - {None}
        kind = "unreadable" if "unreadable" in found else ("escaped" if found else "gone")
        out[kind].append(item.doc_id)
    return out["escaped"], out["unreadable"], out["gone"]


def _named(doc_ids: Sequence[str], shown: int = 5) -> str:
    more = f" and {len(doc_ids) - shown} more" if len(doc_ids) > shown else ""
    return ", ".join(doc_ids[:shown]) + more


def _guarded(result: RootPlan, deletable: list[str], guard: DeleteGuard, known: int) -> list[str]:
    """``deletable`` (files seen gone), unless full mode's mass-delete guard refuses.

    Raises:
        MassDeleteRefused: see :func:`plan_root`.
    """
    if not deletable or guard.allow_mass_delete:
        return deletable
    name = result.root.name
    if not result.discovery.files:
        raise MassDeleteRefused(
            f"root {name} ({display_path(result.root.path)}) holds no files; full mode would "
            f"delete all {len(deletable)} of its documents. Nothing was deleted. Check the share "
            "is mounted, or pass --allow-mass-delete.")
    fraction = len(deletable) / max(known, 1)
    if fraction > guard.max_delete_fraction:
        raise MassDeleteRefused(
            f"full mode would delete {len(deletable)} of {known} documents of root {name} "
            f"({fraction:.0%} > {guard.max_delete_fraction:.0%}). Nothing was deleted. Pass "
            "--allow-mass-delete or raise --max-delete-fraction.")
    return deletable


