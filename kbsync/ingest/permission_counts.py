"""The run summary's permission counts: documents only their owner may read, documents
whose permissions could not be read (root only), and the warnings that name them.
Separate from :mod:`kbsync.ingest.summary`, which adds them up, to keep that one short."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kbsync.perms.rule import Profile

if TYPE_CHECKING:
    from kbsync.ingest.plan import RootPlan

LISTED = 10
"""Documents a warning names before it counts the rest."""


def permission_counts(rp: RootPlan) -> tuple[int, int, str | None]:
    """``(owner_only, unreadable, warning)`` of a root's plan slice: its documents only their
    owner may read, those whose permissions could not be read (visible to root only), and
    the one warning naming the latter (``None`` when there are none)."""
    decided: dict[str, bool] = {}
    owner_only = 0
    for item in rp.plan.items:
        source = item.file
        if source is None or source.access is None:
            continue
        if source.access not in decided:
            decided[source.access] = Profile(source.access, source.access_grants).owner_only()
        owner_only += decided[source.access]
    unreadable = rp.discovery.unreadable_access
    if not unreadable:
        return owner_only, 0, None
    named = "; ".join(f"{doc_id} ({why})" for doc_id, why in unreadable[:LISTED])
    more = f"; and {len(unreadable) - LISTED} more" if len(unreadable) > LISTED else ""
    return owner_only, len(unreadable), (
        f"{len(unreadable)} document(s) whose permissions cannot be read are visible to root "
        f"only: {named}{more}"[:2000])


def owner_only_warning(files_seen: int, owner_only: int) -> str | None:
    """The warning of a run where no document is readable by anyone but its owner: other
    readers would see an index that looks empty to them."""
    if files_seen and owner_only >= files_seen:
        return (f"all {files_seen} document(s) can be read only by their owner (and root): "
                "other readers will find nothing; give them read access on the share (chmod, "
                "setfacl) and sync again (docs/permissions.md)")
    return None
