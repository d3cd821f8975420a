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
- :func:`check_measurable` (before anything is built): a query none of whose relevant
  documents is in the live collection measures nothing (both sides score 0.0), and a mean
  over such queries dilutes the drop of the ones that do measure (2 measurable of 31: a
  0.0435 drop read as 0.0208). The gate compares the two collections on the measurable
  queries only (:func:`measurable`, the same set on both sides, see
  :func:`kbsync.maintenance.rebuild.decide`) and refuses with fewer than
  :func:`required_measurable` of them; :func:`gate_of` picks the queries,
  :func:`gated_mean` scores them, :func:`gate_line` says how many were left out.
- :func:`infer_live_build`: the build settings of a live collection no rebuild made
  (it has no build record), found by the fingerprint its documents carry, so a rollback
  restores it with the settings it was built with, not the rebuild's new ones.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import AbstractSet, Any, Callable, Sequence

from kbsync.errors import MassDeleteRefused, UsageError
from kbsync.catalog import active
from kbsync.ingest.plan import DeleteGuard, preflight_root
from kbsync.settings import Settings

log = logging.getLogger(__name__)

MIN_MEASURABLE = 5
"""The fewest measurable queries the gate decides on (fewer when fewer are labelled, see
:func:`required_measurable`). Why 5: on n queries one query moving a single rank (nDCG@10
1.0 -> 0.63) moves the mean by 0.37/n; under 5 that is over 0.07, several times any
sensible ``--max-drop`` (0.02 by default), so the gate would decide on one query's noise.
A module constant, not a setting: a gate on fewer is not a gate, whatever the team."""

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


def required_measurable(labelled: int, minimum: int = MIN_MEASURABLE) -> int:
    """The fewest measurable queries the gate accepts out of ``labelled`` (queries with a
    relevant document): ``minimum``, or all of them when fewer are labelled (a small query
    file on purpose, for a small collection, is still a gate when every query measures;
    asking it for 5 would refuse every rebuild), and never fewer than 1."""
    return max(1, min(minimum, labelled))


def measurable(queries: Sequence, live_docs: AbstractSet[str]) -> list[int]:
    """Indexes (in ``queries``' order) of the queries that can measure: at least one of
    their relevant documents is in ``live_docs``. Unlabelled queries never measure."""
    return [i for i, q in enumerate(queries) if not live_docs.isdisjoint(q.relevant)]


def check_measurable(queries: Sequence, live_docs: AbstractSet[str], *, namespace: str,
                     collection: str, minimum: int = MIN_MEASURABLE) -> list[int]:
    """Refuse a gate that cannot measure: fewer than :func:`required_measurable` queries
    have a relevant document in the live collection. Returns the measurable indexes.

    Raises:
        UsageError: no query's relevant document is in ``namespace`` of the live
            collection (e.g. a forgotten ``--namespace``), or too few of them are.
    """
    relevant = {doc_id for q in queries for doc_id in q.relevant}
    if not relevant & live_docs:
        raise UsageError(f"rebuild refused, nothing was built: none of the {len(queries)} "
                         f"queries' {len(relevant)} relevant documents is in namespace "
                         f"{namespace!r} of the live collection {collection}, so the gate "
                         "could measure nothing (pass --namespace NS, the namespace the "
                         "queries were written for)")
    found = measurable(queries, live_docs)
    labelled = sum(1 for q in queries if q.relevant)
    need = required_measurable(labelled, minimum)
    if len(found) < need:
        raise UsageError(f"rebuild refused, nothing was built: only {len(found)} of the "
                         f"{len(queries)} queries have a relevant document in namespace "
                         f"{namespace!r} of the live collection {collection}; the gate needs "
                         f"at least {need} (the others score 0.0 on both sides and measure "
                         "nothing): label queries with documents the collection holds")
    return found


def gated_mean(result: dict[str, Any], mode: str, indexes: list[int]) -> float | None:
    """Mean nDCG@10 of ``mode`` over the queries at ``indexes`` (4 digits, as the eval's);
    ``None`` when a score is missing.."""
    scores = result["ndcg_per_query"].get(mode) or []
    values = [scores[i] for i in indexes if i < len(scores) and scores[i] is not None]
    return round(sum(values) / len(values), 4) if values and len(values) == len(indexes) else None


def gate_of(live: dict[str, Any], shadow: dict[str, Any]) -> dict[str, Any] | None:
    """Which queries the gate compares: the LIVE result's ``measurable`` ones (a relevant
    document in the live collection), the same indexes on both sides, so a query the shadow
    lost a document of counts as the drop it is. ``None`` when the results carry no
    per-query scores (made by hand): the modes' means are compared then, as before."""
    if "measurable" not in live or "ndcg_per_query" not in live or "ndcg_per_query" not in shadow:
        return None
    if live.get("queries_hash") != shadow.get("queries_hash"):
        return None  # not the same queries: nothing to align by index
    indexes = list(live["measurable"])
    total = int(live.get("queries") or 0)
    labelled = max((m.get("scored") or 0 for m in live.get("modes", {}).values()), default=0)
    return {"queries": total, "measured": len(indexes), "left_out": total - len(indexes),
            "minimum": required_measurable(labelled), "indexes": indexes}


def gate_line(decision: dict[str, Any]) -> str | None:
    """One line on what the gate measured (the story's and the CLI's), or ``None``."""
    gate = decision.get("gate")
    if not gate:
        return None
    return (f"gate measured on {gate['measured']} of {gate['queries']} queries "
            f"({gate['left_out']} left out: no relevant document in the live collection; "
            f"at least {gate['minimum']} needed)")


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
