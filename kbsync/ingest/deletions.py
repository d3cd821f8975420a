"""What full mode may delete from a root, and why the other missing documents stay: the
plan's last slice decides it (:func:`kbsync.ingest.plan.plan_root`), and the preflight
of every root before any is written (:func:`kbsync.ingest.plan.preflight_root`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from kbsync.errors import ErrorCode, MassDeleteRefused
from kbsync.ingest.walk import WalkRules, filtered_out
from kbsync.models import Failure, PlanAction, RootSpec, SyncMode, display_path

if TYPE_CHECKING:
    from kbsync.ingest.plan import PlanCursor, RootPlan


@dataclass(frozen=True)
class DeleteGuard:
    """Limits on what full mode may delete from one root."""

    allow_mass_delete: bool = False
    max_delete_fraction: float = 0.5


@dataclass(frozen=True)
class Scope:
    """What full mode may delete from a root: under ``guard``, and only documents whose
    path the run's filters (``rules``: include/exclude only) let the walk see."""

    guard: DeleteGuard
    rules: WalkRules


def deletable(result: RootPlan, scope: Scope, cursor: PlanCursor,
               mode: SyncMode) -> list[str]:
    """The doc_ids to delete from the root, and why the other missing ones stay.

    Invariant: a document is deleted only when discovery saw its file is gone (full
    mode, under the guard) or that its path now leads out of the root through a link (any
    mode: the share no longer holds it, and what the link leads to must not stay
    indexed). A document discovery could not read (an entry it could not stat, a folder
    it could not list or enter) is never deleted: it is kept and named in one warning.
    Nor is one the run's include/exclude filters leave out (full mode counts it in
    ``kept_excluded``, one warning): the walk never looked at its file.
    """
    escaped, unreadable, gone = triage_missing(result, cursor.problems)
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
    gone, result.kept_excluded = _outside_filters(result.root, gone, scope.rules)
    if result.kept_excluded:
        result.warnings.append(
            f"root {result.root.name}: {len(result.kept_excluded)} documents are left out by "
            f"--include/--exclude and were kept, not deleted (full mode deletes only documents "
            f"whose files the filters let it see are gone): {_named(result.kept_excluded)}")
    return sorted(escaped + _guarded(result, gone, scope.guard, cursor))


def _outside_filters(root: RootSpec, doc_ids: list[str], rules: WalkRules
                     ) -> tuple[list[str], list[str]]:
    """``doc_ids`` split into (inside the run's filters, left out by them), in order."""
    if not rules.include and not rules.exclude:
        return doc_ids, []
    inside: list[str] = []
    outside: list[str] = []
    prefix = len(root.name) + 1  # doc_id = NAME/rel
    for doc_id in doc_ids:
        (outside if filtered_out(doc_id[prefix:], rules) else inside).append(doc_id)
    return inside, outside


def triage_missing(result: RootPlan, problems: Sequence[Failure]
                   ) -> tuple[list[str], list[str], list[str]]:
    """The plan's missing doc_ids as (escaped, unreadable, gone), each in doc_id order.

    ``escaped``: at or under a link discovery found leading out of the root;
    ``unreadable``: at or under an entry discovery could not read; ``gone``: the rest,
    whose file discovery saw is not there (the only ones full mode may delete as missing).
    """
    kinds: dict[str, str] = {}
    for problem in problems:  # the whole root's (a slice's discovery has its range's only)
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


def _guarded(result: RootPlan, deletable: list[str], guard: DeleteGuard,
             cursor: PlanCursor) -> list[str]:
    """``deletable`` (files seen gone), unless full mode's mass-delete guard refuses.

    Raises:
        MassDeleteRefused: see :func:`plan_root`.
    """
    if not deletable or guard.allow_mass_delete:
        return deletable
    name, known = result.root.name, cursor.check.documents
    if not cursor.files:
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
