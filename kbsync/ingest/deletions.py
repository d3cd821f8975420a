"""The rules of what full mode may delete from a root, and why the other missing documents
stay: the plan's last slice applies them (:func:`kbsync.ingest.plan.plan_root`), as does the
preflight of every root before any is written (:func:`kbsync.ingest.plan.preflight_root`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from kbsync.errors import ErrorCode, MassDeleteRefused
from kbsync.ingest.walk import WalkRules, filtered_out
from kbsync.models import Failure, RootSpec, display_path

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


def outside_filters(root: RootSpec, doc_ids: list[str], rules: WalkRules
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


def triage_missing(missing: Sequence[str], problems: Sequence[Failure]
                   ) -> tuple[list[str], list[str], list[str]]:
    """The ``missing`` doc_ids (recorded, no file seen) as (escaped, unreadable, gone), each
    in the order given.

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
    for doc_id in missing:
        parts = doc_id.split("/")
        found = {kinds.get("/".join(parts[:n])) for n in range(1, len(parts) + 1)} - {None}
        kind = "unreadable" if "unreadable" in found else ("escaped" if found else "gone")
        out[kind].append(doc_id)
    return out["escaped"], out["unreadable"], out["gone"]


def named(doc_ids: Sequence[str], shown: int = 5) -> str:
    more = f" and {len(doc_ids) - shown} more" if len(doc_ids) > shown else ""
    return ", ".join(doc_ids[:shown]) + more


def guarded(root: RootSpec, deletable: list[str], guard: DeleteGuard, *, files: int,
            known: int) -> list[str]:
    """``deletable`` (files seen gone), unless full mode's mass-delete guard refuses: the
    root's walk saw ``files`` files and it has ``known`` documents.

    Raises:
        MassDeleteRefused: see :func:`kbsync.ingest.plan.plan_root`.
    """
    if not deletable or guard.allow_mass_delete:
        return deletable
    name = root.name
    if not files:
        raise MassDeleteRefused(
            f"root {name} ({display_path(root.path)}) holds no files; full mode would "
            f"delete all {len(deletable)} of its documents. Nothing was deleted. Check the share "
            "is mounted, or pass --allow-mass-delete.")
    fraction = len(deletable) / max(known, 1)
    if fraction > guard.max_delete_fraction:
        raise MassDeleteRefused(
            f"full mode would delete {len(deletable)} of {known} documents of root {name} "
            f"({fraction:.0%} > {guard.max_delete_fraction:.0%}). Nothing was deleted. Pass "
            "--allow-mass-delete or raise --max-delete-fraction.")
    return deletable
