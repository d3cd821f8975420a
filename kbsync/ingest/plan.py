"""Planning a root: discovery diffed against the stored state, with full mode's
mass-delete guard. Writes nothing."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Sequence

from kbsync.errors import MassDeleteRefused
from kbsync.ingest.discover import Discovery, discover
from kbsync.ingest.state import Plan, PlanItem, plan_files
from kbsync.ingest.verify import StoreCheck, check_root, damaged_documents
from kbsync.models import PlanAction, RootSpec, SyncMode, display_path

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeleteGuard:
    """Limits on what full mode may delete from one root."""

    allow_mass_delete: bool = False
    max_delete_fraction: float = 0.5


@dataclass
class RootPlan:
    """A root's discovery, its plan, and the documents full mode will delete."""

    root: RootSpec
    discovery: Discovery
    plan: Plan
    to_delete: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_process(self) -> list:
        """New and changed items, in doc_id order."""
        return self.plan.of(PlanAction.NEW) + self.plan.of(PlanAction.CHANGED)


def plan_root(
    root: RootSpec, *, runtime, namespace: str, mode: SyncMode, force: bool = False,
    include: Sequence[str] = (), exclude: Sequence[str] = (), guard: DeleteGuard = DeleteGuard(),
) -> RootPlan:
    """Discover ``root`` and diff it against the stored state. Writes nothing.

    The root's chunk count is checked against its records (one exact count,
    :func:`kbsync.ingest.verify.check_root`); when they differ, the points of each of
    its documents are counted, and those whose count differs from the record
    are planned ``changed`` with ``repair=True`` (counted in ``repaired``).

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
    if mode is SyncMode.FULL:
        result.to_delete = _deletable(result, guard, len(states))
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
    root: RootSpec, *, runtime, namespace: str, include: Sequence[str] = (),
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
    found = discover(root, accept=runtime.accepts, include=include, exclude=exclude)
    states = runtime.states.load(namespace, root.name)
    present = {f.doc_id for f in found.files}
    plan = Plan(items=[PlanItem(PlanAction.MISSING, None, s) for d, s in sorted(states.items())
                       if d not in present])
    return len(_deletable(RootPlan(root=root, discovery=found, plan=plan), guard, len(states)))


def _deletable(result: RootPlan, guard: DeleteGuard, known: int) -> list[str]:
    """Missing doc_ids full mode may delete, after the guard and unreadable-dir protection."""
    protected = tuple(p.doc_id + "/" for p in result.discovery.problems)
    missing = [i.doc_id for i in result.plan.of(PlanAction.MISSING)]
    deletable = [d for d in missing if not d.startswith(protected)]
    if len(deletable) < len(missing):
        result.warnings.append(f"{len(missing) - len(deletable)} missing documents under "
                               "unreadable directories were kept")
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


