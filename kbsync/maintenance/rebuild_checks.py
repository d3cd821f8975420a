"""What a rebuild checks before it builds and before it swaps, so it never loses a root.

A rebuild is a full-mode ingest into an empty shadow, so full mode's own mass-delete
guard (:mod:`kbsync.ingest.plan`) sees nothing to delete there: a share that is empty
for a while (an unmounted SMB or NFS share is an empty folder) would build a shadow
without that root's documents, and the swap would drop them from search. The checks
here hold the rebuild to the same rule as a full sync, measured against the LIVE
collection's documents:

- :func:`guard_roots` (before anything is built): each bound root's files against its
  live documents, with full mode's :class:`~kbsync.ingest.plan.DeleteGuard`. A root
  that holds no files, or one missing more than half of its live documents, refuses
  the rebuild (:class:`~kbsync.errors.MassDeleteRefused`); a deletion on purpose goes
  through the live collection first (``kbsync ingest --mode full --allow-mass-delete``
  or ``kbsync remove --root NAME``), then the rebuild follows it.
- :func:`mass_missing` (in the state check, under the lock): the same rule between the
  live collection and the finished shadow, for a share unmounted during the build.
- :func:`check_measurable` (before anything is built): a gate whose queries find none of
  their relevant documents in the live collection measures nothing (both sides score
  0.0 and the delta is 0), so it refuses instead of passing.
- :func:`infer_live_build`: the build settings of a live collection no rebuild made
  (it has no build record), found by the fingerprint its documents carry, so a rollback
  restores it with the settings it was built with, not the rebuild's new ones.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any, Callable, Sequence

from kbsync.errors import MassDeleteRefused, UsageError
from kbsync.catalog import active
from kbsync.ingest.plan import DeleteGuard, preflight_root
from kbsync.settings import Settings

log = logging.getLogger(__name__)

REBUILD_DELETE_HINT = ("a rebuild never drops a root's documents on its own: check the share "
                       "is mounted, or apply the deletion to the live collection first "
                       "(`kbsync ingest --mode full --allow-mass-delete NAME=PATH`, or "
                       "`kbsync remove --root NAME`), then rebuild")


def guard_roots(plan, live_rt, guard: DeleteGuard = DeleteGuard()) -> None:
    """Refuse the rebuild when a bound root's share lacks most of its live documents.

    ``plan``: the :class:`~kbsync.maintenance.rebuild.RebuildPlan`; ``live_rt``: the live
    collection's runtime. Reads the shares and the live records; writes nothing.

    Raises:
        MassDeleteRefused: a root holds no files, or more than
            ``guard.max_delete_fraction`` of its live documents have none.
    """
    for ns in plan.roots:
        for spec in plan.root_specs(ns):
            try:
                preflight_root(spec, runtime=live_rt, namespace=ns, guard=guard)
            except MassDeleteRefused as exc:
                # Full mode's words without its "pass --allow-mass-delete" (rebuild has none).
                what = str(exc).split(". Nothing was deleted", 1)[0]
                raise MassDeleteRefused(
                    f"rebuild of {plan.logical} refused, nothing was built: namespace {ns!r}: "
                    f"{what.replace('full mode would delete', 'the shadow would lack')}; "
                    f"{REBUILD_DELETE_HINT}") from exc


def mass_missing(live_docs: Sequence[str], shadow_docs: Sequence[str], root: str, *,
                 guard: DeleteGuard = DeleteGuard()) -> tuple[int, int] | None:
    """``(missing, live)`` when the shadow lacks root ``root``'s live documents past the
    guard (all of them, or more than ``guard.max_delete_fraction``), else ``None``."""
    prefix = root + "/"
    live = [d for d in live_docs if d.startswith(prefix)]
    present = set(shadow_docs)
    gone = [d for d in live if d not in present]
    if not gone:
        return None
    if len(gone) == len(live) or len(gone) / len(live) > guard.max_delete_fraction:
        return len(gone), len(live)
    return None


def check_measurable(queries: Sequence, live_docs: set[str], *, namespace: str,
                     collection: str) -> None:
    """Refuse a gate that cannot measure: no query's relevant document is live.

    Raises:
        UsageError: none of the queries' relevant documents is in ``namespace`` of the
            live collection (e.g. a forgotten ``--namespace``).
    """
    relevant = {doc_id for q in queries for doc_id in q.relevant}
    if relevant & live_docs:
        return
    raise UsageError(f"rebuild refused, nothing was built: none of the {len(queries)} queries' "
                     f"{len(relevant)} relevant documents is in namespace {namespace!r} of the "
                     f"live collection {collection}, so the gate could measure nothing (pass "
                     "--namespace NS, the namespace the queries were written for)")


def infer_live_build(live: Settings, states, namespaces: Sequence[str],
                     fingerprint_of: Callable[[Settings], str]) -> dict[str, Any]:
    """The build settings the live collection's documents were made with.

    Candidates: the environment's chunk settings and kbsync's defaults (with the live
    collection's own embedder, which ``live`` already carries). The one whose
    fingerprint (``fingerprint_of``: the base fingerprint documents built with those
    settings carry, :attr:`kbsync.runtime.Runtime.fingerprint`) most of the live
    ``states`` carry wins; when none matches (built under settings that are neither),
    the environment's is kept, with a warning: the pointer then records what this
    rebuild saw, as before.
    """
    defaults = {name: Settings.model_fields[name].default for name in active.BUILD_FIELDS
                if name.startswith("chunk") or name == "contextual_text"}
    candidates = [live, live.model_copy(update=defaults)]
    seen = Counter(state.fingerprint for ns in namespaces for state in states.load(ns).values())
    scored = [(seen.get(fingerprint_of(c), 0), -i) for i, c in enumerate(candidates)]
    best, index = max(scored)
    if not best:
        log.warning("collection %s: no document carries the fingerprint of the current or "
                    "the default chunk settings; recording the current ones as its build",
                    live.collection)
    return active.build_of(candidates[-index])
