"""``kbsync verify --repair``: make the store hold what the state records say again.

The order of the steps is what makes it safe (each can be interrupted and run again):

1. the ingest write lock is held throughout, so no ingest writes meanwhile, and the
   configured embedder is checked against the collection's (``kbsync.catalog.identity``).
   The lock is the front door's decision (``locks``, a
   :class:`~kbsync.catalog.lock.WriteLocks`: ``kbsync verify --repair`` passes
   ``kbsync.app.locks.write_locks``), never one made here;
2. a missing chunk collection is re-created (empty);
3. orphan points (no record of any kind names their document) are deleted;
4. every drifted document's record is marked for reprocessing
   (:data:`kbsync.catalog.state.REPAIR_FINGERPRINT`): only the record changes, its points
   stay searchable, and an interrupted repair is finished by the next ingest of
   the root (which plans marked records ``changed``, counted in ``repaired``);
5. the marked documents whose files are found are reprocessed through the
   ingest's own stages (convert, chunk, embed, upsert, delete stale, commit), root
   by root. The root's folder comes from its binding record, else from its
   documents' records; files are found by discovery, so names with undecodable
   bytes are opened by their real path, never by the escaped one in a record;
6. documents whose file is gone (or whose root folder is unknown, like
   ``kbsync.api`` texts) keep their points and their marked record: nothing that
   is indexed is lost. They are listed as ``kept``.

Then the store is verified again; ``remaining`` is the drift left.

Before any of this, :func:`finish_removals` completes every ``kbsync remove`` that was
interrupted (its intent record is left, :mod:`kbsync.ingest.remove`): the documents of a
root being removed are removed, never rebuilt from their files.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Mapping

from kbsync.catalog.identity import ROOT_BINDING
from kbsync.ingest import identity
from kbsync.ingest.context import RunContext
from kbsync.ingest.discover import discover, iter_batches
from kbsync.ingest.runner import process_batch
from kbsync.ingest.summary import Count, new_run_id
from kbsync.catalog.lock import WriteLocks, given_or_embedded
from kbsync.models import DocState, RootSpec
from kbsync.catalog.state import REPAIR_FINGERPRINT
from kbsync.ingest.classify import plan_files
from kbsync.maintenance.verify import NamespaceReport, VerifyReport, verify

log = logging.getLogger(__name__)


@dataclass
class RepairResult:
    """What ``--repair`` did, per namespace summed (the ``repair`` object of the JSON)."""

    orphans_deleted: int = 0
    marked: int = 0
    reprocessed: int = 0
    kept: list[str] = field(default_factory=list)  # drifted, but no file to rebuild from
    failures: list[dict] = field(default_factory=list)
    collection_recreated: bool = False
    set_aside: str | None = None  # where a damaged (unopenable) collection folder went

    def to_dict(self) -> dict:
        """JSON form (``kept`` lists at most 20 doc_ids; ``kept_count`` is complete)."""
        return {"orphans_deleted": self.orphans_deleted, "marked": self.marked,
                "reprocessed": self.reprocessed, "kept_count": len(self.kept),
                "kept": sorted(self.kept)[:20], "failed": len(self.failures),
                "failures": self.failures[:20],
                "collection_recreated": self.collection_recreated,
                "set_aside": self.set_aside}


def repair(runtime: RunContext, report: VerifyReport, *, namespace: str | None = None,
           locks: WriteLocks | None = None, keep_orphans: bool = False
           ) -> tuple[RepairResult, VerifyReport]:
    """Fix the drift in ``report`` (see the module docstring for the order and its limits).

    Args:
        runtime: an open :class:`kbsync.runtime.Runtime` with its embedding service.
        report: what :func:`kbsync.maintenance.verify.verify` found.
        namespace: the namespace ``report`` was limited to (``None``: all).
        locks: the front door's lock decision (none: the lock file, embedded store only).
        keep_orphans: leave orphan points (the state records were just rebuilt from the
            shares, :mod:`kbsync.maintenance.state_rebuild`: an orphan may be a document
            whose record could not be rebuilt, never to be deleted then).

    Returns:
        What was done, and a fresh verification of the same namespaces.
    Raises:
        LockHeld: an ingest is running.
        EmbedderMismatch: the configured embedder is not the collection's.
        UsageError: no ``locks`` against a Qdrant server.
    """
    held = given_or_embedded(locks, runtime.settings)
    result = RepairResult()
    for ns, part in sorted(report.namespaces.items()):
        if not part.drifted() and not report.collection_missing:
            continue
        with held.hold(ns, "repair"):
            _repair_namespace(runtime, ns, part, result, keep_orphans=keep_orphans)
    after = verify(runtime.store, collection=runtime.collection,
                   state_collection=runtime.settings.state_collection, namespace=namespace)
    return result, after


def finish_removals(runtime: RunContext, namespace: str | None = None, *,
                    locks: WriteLocks | None = None) -> list[dict]:
    """Finish the interrupted removals of ``namespace`` (all when ``None``), each under
    its namespace's write lock (``locks``: as for :func:`repair`); what each removed now
    (``Removal.to_dict``).

    Raises:
        LockHeld: an ingest is running.
    """
    from kbsync.ingest import remove

    settings = runtime.settings
    found = remove.pending(runtime.store, state_collection=settings.state_collection,
                           namespace=namespace)
    done: list[dict] = []
    held = given_or_embedded(locks, settings)
    for ns in sorted({t.namespace for t in found}):
        with held.hold(ns, "repair"):
            done.extend(r.to_dict() for r in remove.finish_pending(
                runtime.store, collection=runtime.collection,
                state_collection=settings.state_collection, namespace=ns))
    return done


def set_aside_damaged(runtime: RunContext, *, locks: WriteLocks | None = None
                      ) -> Path | None:
    """Rename an embedded chunk collection the engine cannot open; returns where it went.

    The folder is kept (``<name>.damaged-<UTC time>`` beside it), never deleted;
    the collection then counts as missing and every document is rebuilt from
    its file. Only the chunk collection (the state collection's damage is
    :mod:`kbsync.maintenance.damage`'s). A collection that opens but cannot be read
    through is :func:`kbsync.maintenance.damage.set_aside_collection`'s.

    Raises:
        StoreDrift, StoreDamaged: the store is a server's or another process's (read
            through its relay: renaming its folder would pull it from under that
            process), or the state collection is the damaged one.
        LockHeld: an ingest is running.
    """
    from kbsync.maintenance.damage import DAMAGE_ERRORS, set_aside_collection
    from kbsync.store.edge.store import EdgeStore

    try:
        runtime.store.collection_dimension(runtime.collection)
        return None
    except DAMAGE_ERRORS:
        if not isinstance(runtime.store, EdgeStore):
            raise
        return set_aside_collection(runtime, runtime.collection, locks=locks)


def _repair_namespace(runtime: RunContext, namespace: str, part: NamespaceReport,
                      result: RepairResult, *, keep_orphans: bool = False) -> None:
    """Steps 1-6 of the module docstring for one namespace, under its write lock."""
    plan = identity.check_run([], runtime=runtime, namespace=namespace)
    if runtime.store.collection_dimension(runtime.collection) is None:
        result.collection_recreated = True
    runtime.ensure_collection()
    run_id = new_run_id()
    identity.record_run(plan, runtime=runtime, run_id=run_id)
    if part.orphan_ids and not keep_orphans:
        runtime.store.delete_ids(runtime.collection, part.orphan_ids)
        result.orphans_deleted += len(part.orphan_ids)
        log.info("deleted %d orphan points of namespace %s", len(part.orphan_ids), namespace)
    todo = {d: part.states[d] for d in part.to_reprocess()}
    _mark(runtime, todo.values(), result)
    found = _reprocess(runtime, namespace, todo, run_id, result)
    result.kept.extend(sorted(set(todo) - found))


def _mark(runtime: RunContext, states: Iterable[DocState], result: RepairResult) -> None:
    """Give each record the repair fingerprint (its points are left as they are)."""
    marked = [replace(s, fingerprint=REPAIR_FINGERPRINT) for s in states]
    runtime.states.commit(marked)
    result.marked += len(marked)


def _reprocess(runtime: RunContext, namespace: str, todo: Mapping[str, DocState], run_id: str,
               result: RepairResult) -> set[str]:
    """Rebuild the documents of ``todo`` whose files are found; returns their doc_ids."""
    found: set[str] = set()
    by_root: dict[str, dict[str, DocState]] = {}
    for doc_id, state in todo.items():
        by_root.setdefault(state.root, {})[doc_id] = state
    for root, states in sorted(by_root.items()):
        folder = _root_folder(runtime, namespace, root, states.values())
        if folder is None:
            log.warning("root %s of namespace %s: folder unknown or gone; %d drifted "
                        "documents kept as they are", root, namespace, len(states))
            continue
        files = [f for f in discover(RootSpec(root, folder), accept=runtime.accepts).files
                 if f.doc_id in states]
        plan = plan_files(files, states, fingerprint=runtime.fingerprint, ocr_key=runtime.ocr_key,
                          repair=frozenset(states))  # every one `changed`, bytes hashed
        result.failures.extend(f.to_dict() for f in plan.failures)
        items = [i for i in plan.items if i.file is not None]
        found.update(i.doc_id for i in items)
        found.update(f.doc_id for f in plan.failures)  # unreadable now: reported, not kept
        for batch in iter_batches(items, runtime.settings.files_per_batch):
            for stage in process_batch(batch, runtime=runtime, namespace=namespace,
                                       run_id=run_id):
                result.failures.extend(f.to_dict() for f in stage.failures)
                result.reprocessed += stage.counters[Count.ADDED] + stage.counters[Count.UPDATED]
    return found


def _root_folder(runtime: RunContext, namespace: str, root: str, states: Iterable[DocState]
                 ) -> Path | None:
    """The existing folder root ``root`` was synced from, or ``None``.

    The root's binding record is asked first; a store without one (made by an
    older kbsync) gives it through any document record whose path ends with
    its doc_id's relative part.
    """
    for record in runtime.states.read_meta(ROOT_BINDING, bound_namespace=namespace):
        if record.get("root") == root and Path(record.get("path", "")).is_dir():
            return Path(record["path"])
    for state in states:
        rel = state.doc_id[len(root) + 1:]
        if state.doc_id.startswith(root + "/") and rel and state.path.endswith("/" + rel):
            folder = Path(state.path[:-len(rel) - 1])
            if folder.is_dir():
                return folder
    return None
