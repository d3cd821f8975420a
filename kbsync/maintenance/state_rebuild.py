"""``kbsync verify --repair`` on a damaged state collection: set it aside and rebuild its
records from the shares, which the chunk collection's payloads name (issue 37).

The state collection (``<collection>_state``) holds one record per document and the roots'
bindings; when the engine cannot read it, nothing can plan, search or verify. Its records
are rebuilt so:

1. every chunk's payload names its namespace, root, file path and path in the root, so
   each root's folder is recovered from the chunk collection (:func:`roots_of`);
2. the state collection is renamed aside (``<name>.damaged-<UTC time>``, kept);
3. each root whose folder still exists is ingested again into its namespace: every file
   is planned as new, its chunks get the same deterministic ids (the embeddings come from
   the cache), so the points are overwritten in place and the records written afresh.

Limits: documents of a root whose folder is gone, and texts added through ``kbsync.api``
(no folder), get no record back; their points are kept (``repair`` is then told to keep
orphans) and reported as ``not_rebuilt``. Only the embedded store this process holds.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from kbsync.catalog.lock import WriteLocks
from kbsync.catalog.state import StateStore, utc_now
from kbsync.ingest.context import RunContext
from kbsync.maintenance.damage import set_aside_collection
from kbsync.models import RootSpec

log = logging.getLogger(__name__)


@dataclass
class StateRebuild:
    """What the rebuild did (the ``state_rebuilt`` object of ``kbsync verify --json``)."""

    set_aside: str = ""
    roots: list[dict] = field(default_factory=list)  # namespace, root, folder, documents
    not_rebuilt: list[dict] = field(default_factory=list)  # namespace, root, why

    def to_dict(self) -> dict:
        """JSON form."""
        return {"set_aside": self.set_aside, "roots": self.roots, "not_rebuilt": self.not_rebuilt}


def roots_of(runtime: RunContext) -> dict[tuple[str, str], Path | None]:
    """``(namespace, root) -> folder`` from the chunk payloads (``None``: no payload gives
    a folder, e.g. ``kbsync.api`` texts)."""
    found: dict[tuple[str, str], Path | None] = {}
    for point in runtime.store.scroll(runtime.collection):
        payload = point.payload
        key = (str(payload.get("namespace") or ""), str(payload.get("root") or ""))
        if found.get(key) is not None:
            continue
        path, rel = payload.get("path"), payload.get("rel_path")
        folder = None
        if isinstance(path, str) and isinstance(rel, str) and rel and path.endswith("/" + rel):
            folder = Path(path[:-len(rel) - 1])
        found[key] = folder
    return found


def _record_embedder(runtime: RunContext) -> None:
    """Record the configured embedder with the current sparse encoder before the roots are
    ingested again: without a record, a collection that holds points is taken for one made
    before records existed, and written with the legacy sparse encoder while queries use
    the current one (measured: every BM25 search then found nothing). The rebuild rewrites
    every chunk it can, so they all get the current encoder."""
    from kbsync.catalog.identity import EMBEDDER, EmbedderIdentity

    service = runtime.service  # verify --repair opens the runtime with its embedder
    identity = EmbedderIdentity(service.provider, service.model, service.dimension)
    runtime.states.write_meta(EMBEDDER, (), {**identity.to_payload(),
                                             "collection": runtime.collection,
                                             "recorded_at": utc_now(), "run_id": "repair"})


def rebuild_state(runtime: RunContext, *, locks: WriteLocks | None = None) -> StateRebuild:
    """Steps 1-3 of the module docstring.

    Raises:
        StoreDamaged: the store is not an embedded one this process holds.
        LockHeld: an ingest is running.
    """
    from kbsync.ingest.runner import run_plain

    name = runtime.settings.state_collection
    roots = roots_of(runtime)
    result = StateRebuild()
    result.set_aside = str(set_aside_collection(runtime, name, locks=locks))
    runtime.states = StateStore(runtime.store, name)  # made again: the old one knew it ready
    _record_embedder(runtime)
    for (namespace, root), folder in sorted(roots.items(), key=lambda kv: kv[0]):
        if folder is None or not folder.is_dir():
            why = "no folder in its chunks" if folder is None else f"folder {folder} is gone"
            result.not_rebuilt.append({"namespace": namespace, "root": root, "why": why})
            continue
        summary = run_plain([RootSpec(root, folder)], runtime=runtime, namespace=namespace,
                            locks=locks)
        done = summary.to_dict()
        result.roots.append({"namespace": namespace, "root": root, "folder": str(folder),
                             "documents": done.get("added", 0) + done.get("updated", 0),
                             "failed": done.get("failed", 0)})
        log.warning("state collection %s: records of root %s (namespace %s) rebuilt from %s",
                    name, root, namespace, folder)
    return result
