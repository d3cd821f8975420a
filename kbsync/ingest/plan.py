"""Planning a root: discovery diffed against the stored state, in slices of files in doc_id
order (so a large root's plan does not grow with it), with full mode's mass-delete guard.
Writes nothing."""

from __future__ import annotations

import hashlib
import logging
from array import array
from dataclasses import dataclass, field, replace
from typing import Iterable, Iterator, Mapping, Sequence

from kbsync.ingest.deletions import (DeleteGuard, Scope, guarded, named, outside_filters,
                                     triage_missing)
from kbsync.ingest.discover import drop_ambiguous
from kbsync.ingest.classify import Plan, PlanItem, plan_files
from kbsync.ingest.context import IngestContext
from kbsync.ingest.listing import (SliceMark, kept_marks, listing_key, listing_payload,
                                   slice_digest, slice_is_clean, unchanged_plan)
from kbsync.ingest.walk import (Discovery, WalkCursor, WalkRules, iter_files,
                                log_unlogged)
from kbsync.catalog import failed
from kbsync.catalog.checks import StoreCheck, check_root, damaged_documents
from kbsync.models import DocState, Failure, PlanAction, RootSpec, SourceFile, SyncMode, display_path

log = logging.getLogger(__name__)


@dataclass
class PlanCursor:
    """Where the next slice of a root's plan starts, and what the root's last slice needs
    of the slices before it. One entry per directory and per problem, 8 bytes per file
    (``seen``), no record per file.

    ``check`` and ``damaged`` come from the first slice (the store check over the root's
    records, streamed); ``documents_before``: how many records the root had then;
    ``matched``: how many of them were files the slices planned. ``marks``: the slices of
    the root's last clean run (:mod:`kbsync.ingest.listing`), read with the check;
    ``listing``: this run's, one a slice; ``clean``: every slice so far was."""

    walk: WalkCursor
    check: StoreCheck
    damaged: frozenset[str] = frozenset()
    matched: int = 0
    files: int = 0
    ignored: int = 0
    new: int = 0
    problems: list[Failure] = field(default_factory=list)
    seen: array = field(default_factory=lambda: array("Q"))
    marks: tuple[SliceMark, ...] | None = None
    listing: list[SliceMark] = field(default_factory=list)
    clean: bool = True
    # the marks once the run has written what it plans (new files matched too), and
    # whether every slice will be clean then (listing.slice_is_clean(once_written=True))
    written: list[SliceMark] = field(default_factory=list)
    clean_once_written: bool = True


@dataclass
class RootPlan:
    """A root's plan, or one slice of it (``cursor`` set: more slices follow).

    A slice holds the files of one doc_id range: its discovery (files, ignored, problems of
    that range) and its plan (new, changed, unchanged, heal). The root's last slice (or a
    whole-root plan, ``cursor`` None) also holds what needs the whole root: the ``missing``
    items, the documents the run deletes (``to_delete``: in full mode those whose file is
    gone, unless the run's ``include``/``exclude`` filters leave them out (``kept_excluded``);
    in any mode those reached through a link that now leads out of the root,
    :func:`_deletable`), and the root's warnings.

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
    # full mode: recorded documents the run's include/exclude filters leave out (kept)
    kept_excluded: list[str] = field(default_factory=list)
    cursor: PlanCursor | None = None
    # the run's include/exclude filters left part of the root unlooked at
    filtered: bool = False
    # the last slice: remembered failures of files the walk no longer sees (finish forgets them)
    forget_failures: list[str] = field(default_factory=list)
    # the last slice of a clean root: its listing, kept for the next run (kbsync.ingest.listing)
    listing: dict | None = None
    # the last slice of a root that will be clean once its run has written what it plans:
    # the listing that run keeps if every file it writes is written whole
    listing_once_written: dict | None = None

    def to_process(self) -> list:
        """New and changed items, in doc_id order."""
        return self.plan.of(PlanAction.NEW) + self.plan.of(PlanAction.CHANGED)


def plan_root(
    root: RootSpec, *, runtime: IngestContext, namespace: str, mode: SyncMode, force: bool = False,
    include: Sequence[str] = (), exclude: Sequence[str] = (), guard: DeleteGuard = DeleteGuard(),
    cursor: PlanCursor | None = None, limit: int | None = None,
) -> RootPlan:
    """Discover ``root`` (or its next ``limit`` files after ``cursor``) and diff the files
    against their stored state. Writes nothing.

    A root is planned in slices of ``limit`` files in doc_id order (``None``: the whole
    root in one): give each slice's ``cursor`` to the next call until it is ``None``. A
    slice reads the records of its own files only, so the run holds one slice's records
    at a time. The first slice checks the root's chunk count against its records (one
    exact count, :func:`kbsync.catalog.checks.check_root`, over the records streamed);
    when they differ, the points of each of its documents are counted, and those whose
    count differs from the record are planned ``changed`` with ``repair=True`` (counted in
    ``repaired``). The last slice finds the recorded documents no slice saw (``missing``),
    keeps those discovery could not read (``kept_unreadable``) and, in full mode, those the
    ``include``/``exclude`` filters leave out (``kept_excluded``: a filter narrows what the
    run looks at, it never deletes), never deleting them, and applies full mode's guard.

    Raises:
        MassDeleteRefused: (the last slice) full mode would empty the root or delete more
            than ``guard.max_delete_fraction`` of its documents without
            ``guard.allow_mass_delete``.
    """
    fkey = failed.failure_key(runtime.fingerprint, runtime.ocr_key,
                              runtime.config.max_file_bytes)
    key = listing_key(root, fkey, limit)
    # A copy: the caller may still hold (and pickle) the previous slice, whose cursor this is.
    cursor = (_copied(cursor) if cursor is not None
              else _first_cursor(root, runtime, namespace, key))
    found = Discovery(root=root, problem_counts=cursor.walk.problem_counts)
    walked = iter_files(found, WalkRules(runtime.accepts, include, exclude),
                        after=cursor.walk.after or None, visited=cursor.walk.visited)
    files, more = _take(walked, limit)
    files = drop_ambiguous(found, files)
    remembered = failed.load(runtime.states, namespace, root.name)
    mark = SliceMark(files[0].doc_id if files else "", len(files), slice_digest(files), 0)
    kept = None if force else _kept_mark(mark, found, cursor)
    plan = unchanged_plan(files, remembered, fkey) if kept is not None else None
    if kept is None or plan is None:  # planned from the slice's records
        states = runtime.states.load_docs(namespace, [f.doc_id for f in files])
        plan = plan_files(files, states, fingerprint=runtime.fingerprint,
                          ocr_key=runtime.ocr_key, force=force, repair=cursor.damaged,
                          remembered=remembered, failure_key=fkey)
        kept = replace(mark, matched=len(states))
    cursor.listing.append(kept)
    cursor.clean = cursor.clean and slice_is_clean(plan, len(found.problems))
    cursor.written.append(replace(kept, matched=kept.matched + len(plan.of(PlanAction.NEW))))
    cursor.clean_once_written = cursor.clean_once_written and slice_is_clean(
        plan, len(found.problems), once_written=True)
    result = RootPlan(root=root, discovery=found, plan=plan, filtered=bool(include or exclude))
    _advance(cursor, result, files, matched=kept.matched)
    found.files = []  # the plan holds them now, hashed: a root's run keeps one copy, not two
    if more:
        result.cursor = cursor
        return result
    log_unlogged(found)
    _finish_root_plan(result, cursor, runtime, namespace, mode,
                      Scope(guard, WalkRules(include=include, exclude=exclude)))
    if remembered and not result.filtered:  # a filter leaves files unlooked at, not gone
        present = _present(doc_digests(remembered), cursor.seen)
        result.forget_failures = [d for d, there in zip(remembered, present) if not there]
    if (not force and not result.filtered and not result.warnings
            and not result.plan.of(PlanAction.MISSING) and not result.forget_failures):
        if cursor.clean:
            result.listing = listing_payload(key, cursor.listing)
        elif cursor.clean_once_written:
            result.listing_once_written = listing_payload(key, cursor.written)
    return result


def _kept_mark(mark: SliceMark, found: Discovery, cursor: PlanCursor) -> SliceMark | None:
    """The kept mark of this slice when the slice is as the root's last clean run saw it
    (:mod:`kbsync.ingest.listing`): the same files, no discovery problem, no drift."""
    index = len(cursor.listing)
    kept = cursor.marks[index] if cursor.marks and index < len(cursor.marks) else None
    if (kept is None or (kept.first, kept.files, kept.digest) != (mark.first, mark.files,
                                                                   mark.digest)
            or found.problems or not cursor.check.matches or cursor.damaged):
        return None
    return kept


def _copied(cursor: PlanCursor) -> PlanCursor:
    """``cursor`` with its own containers, to advance without touching the original."""
    walk = WalkCursor(after=cursor.walk.after, visited=set(cursor.walk.visited),
                      problem_counts=dict(cursor.walk.problem_counts))
    # ``seen`` too: :func:`_advance` extends it in place (one memcpy, 8 bytes a file).
    return replace(cursor, walk=walk, problems=list(cursor.problems),
                   listing=list(cursor.listing), seen=cursor.seen[:],
                   written=list(cursor.written))


def _first_cursor(root: RootSpec, runtime: IngestContext, namespace: str,
                  key: str) -> PlanCursor:
    """The cursor of a root's first slice: the store check over its records (streamed, or
    the kept total), the kept listing (under ``key``) and, where the check fails, the
    documents whose points differ from their record."""
    kept = runtime.states.kept_total(namespace, root.name)
    total = ((int(kept["documents"]), int(kept["chunks"])) if kept is not None
             else runtime.states.chunk_total(namespace, root.name, kept=False))
    check = check_root(runtime.store, runtime.collection, namespace, root.name, total,
                       warn=False)
    if not check.matches:  # a kept total only confirms a match: drift is told by the records
        kept = None
        check = check_root(runtime.store, runtime.collection, namespace, root.name,
                           runtime.states.chunk_total(namespace, root.name, kept=False))
    damaged: frozenset[str] = frozenset()
    if not check.matches:  # rare: only then are the root's records held, once
        damaged = frozenset(damaged_documents(runtime.store, runtime.collection, namespace,
                                              runtime.states.load(namespace, root.name)))
    return PlanCursor(walk=WalkCursor(after=""), check=check, damaged=damaged,
                      marks=kept_marks(kept, key))


def _take(files: Iterator[SourceFile], limit: int | None) -> tuple[list[SourceFile], bool]:
    """Up to ``limit`` files (all with ``None``) and whether more may follow.

    A slice never ends between two files with one doc_id (a name spelled with ``\\x``
    beside the name with that byte, :func:`kbsync.ingest.discover.drop_ambiguous`): only a
    name holding ``\\x`` can have such a twin, so the slice takes one file more then.
    """
    taken: list[SourceFile] = []
    for source in files:
        taken.append(source)
        if limit is not None and len(taken) >= limit and "\\x" not in source.rel_path:
            return taken, True
    return taken, False


def _advance(cursor: PlanCursor, result: RootPlan, files: Sequence[SourceFile], *,
             matched: int) -> None:
    """Fold a slice into the cursor: where the walk stopped, what it saw."""
    if files:
        cursor.walk.after = files[-1].rel_path
    cursor.matched += matched
    cursor.files += len(files)
    cursor.ignored += len(result.discovery.ignored)
    cursor.new += len(result.plan.of(PlanAction.NEW))
    cursor.problems.extend(result.discovery.problems)
    cursor.seen.extend(doc_digests(f.doc_id for f in files))


def doc_digests(doc_ids: Iterable[str]) -> array:
    """64-bit digests of ``doc_ids`` (what a plan keeps of each file it saw), an
    ``array('Q')``: 8 bytes each. Two doc_ids sharing one (about 1 in 10^9 at a million
    files) would keep a gone document, never delete a present one."""
    return array("Q", (int.from_bytes(hashlib.blake2b(d.encode("utf-8"), digest_size=8)
                                      .digest(), "little") for d in doc_ids))


def _present(digests: array, seen: array) -> list[bool]:
    """For each of ``digests``, whether ``seen`` holds it (both ``array('Q')``).

    numpy is imported here, not at module level: a no-op run never gets here (its
    records all match, no failure is remembered), and importing numpy cost it about
    30 ms. The views are zero-copy and released on return, so ``seen`` can still grow
    (an ``array`` exporting its buffer refuses to resize)."""
    import numpy as np

    found = np.isin(np.frombuffer(digests, dtype=np.uint64), np.frombuffer(seen, dtype=np.uint64))
    return found.tolist()


def _finish_root_plan(result: RootPlan, cursor: PlanCursor, runtime: IngestContext,
                      namespace: str, mode: SyncMode, scope: Scope) -> None:
    """The last slice: the root's missing documents, its warnings, what it deletes."""
    missing = _missing(runtime, namespace, result.root, cursor)
    result.plan.items.extend(PlanItem(PlanAction.MISSING, None, s) for s in missing)
    if not cursor.check.matches:
        _warn_drift(result, cursor)
    if not cursor.files and not cursor.ignored:
        result.warnings.append(f"root {result.root.name} ({display_path(result.root.path)}) "
                               "holds no files")
    result.to_delete = _deletable(result, scope, cursor, mode)


def _missing(runtime: IngestContext, namespace: str, root: RootSpec,
             cursor: PlanCursor) -> list[DocState]:
    """The root's records whose file no slice saw, in doc_id order (none read when every
    record the root had was matched by a file)."""
    if cursor.matched >= cursor.check.documents:
        return []
    return _unseen(runtime, namespace, root, cursor.seen)[1]


def _unseen(runtime: IngestContext, namespace: str, root: RootSpec,
            seen: array) -> tuple[int, list[DocState]]:
    """How many records the root has, and those whose doc_id's digest is not in ``seen``
    (in doc_id order); the records stream past, only those are kept."""
    documents, gone = 0, []
    for page in _chunks(runtime.states.iter_records(namespace, root.name), 4096):
        documents += len(page)
        present = _present(doc_digests(s.doc_id for s in page), seen)
        gone += [state for state, there in zip(page, present) if not there]
    return documents, sorted(gone, key=lambda s: s.doc_id)


def _warn_drift(result: RootPlan, cursor: PlanCursor) -> None:
    """The ``warnings`` of a root whose store and state disagree: what is rebuilt, what
    is not (no file to rebuild from, or points no record names) and what to run."""
    damaged = cursor.damaged
    gone = sorted({i.doc_id for i in result.plan.of(PlanAction.MISSING)} & damaged)
    result.warnings.append(f"{cursor.check.describe()}; reprocessing {len(damaged) - len(gone)} "
                           "documents whose points differ")
    if gone:
        result.warnings.append(
            f"root {result.root.name}: {len(gone)} documents whose points no longer match "
            f"their state have no file to rebuild them from (kept as they are: "
            f"{', '.join(gone[:5])}{', ...' if len(gone) > 5 else ''}); see `kbsync verify`")
    elif not damaged and not cursor.new:
        # No document explains the difference (new ones may: a crash before their commit).
        result.warnings.append(
            f"root {result.root.name}: the store holds points no state record names; "
            "`kbsync verify --repair` deletes them")


def preflight_root(
    root: RootSpec, *, runtime: IngestContext, namespace: str, include: Sequence[str] = (),
    exclude: Sequence[str] = (), guard: DeleteGuard = DeleteGuard(), limit: int | None = None,
) -> int:
    """Check full mode's guard for ``root`` without hashing anything (``limit``: the run's
    slice size; ``None``: the context's).

    Run for every root before any root is processed, so a refusal leaves the
    whole run without a single write. Walks the root holding 8 bytes a file; reads the
    root's records only when the walk differs from the root's kept listing (every slice the
    same files as its last clean run, whose records are unwritten since: nothing is
    missing, :mod:`kbsync.ingest.listing`).

    Returns:
        How many documents full mode would delete from the root.
    Raises:
        MassDeleteRefused: as :func:`plan_root`.
    """
    found = Discovery(root=root, quiet=True)
    limit = limit if limit is not None else runtime.config.files_per_slice
    kept = runtime.states.kept_total(namespace, root.name)
    marks = kept_marks(kept, listing_key(root, failed.failure_key(
        runtime.fingerprint, runtime.ocr_key, runtime.config.max_file_bytes), limit))
    files, seen, listing = 0, array("Q"), []
    walked = iter_files(found, WalkRules(runtime.accepts, include, exclude))
    while True:
        chunk, more = _take(walked, limit)
        files += len(chunk)
        seen.extend(doc_digests(f.doc_id for f in chunk))
        if marks is not None:  # the plan's slice: its twins dropped, as the plan drops them
            as_planned = drop_ambiguous(Discovery(root=root, quiet=True), chunk)
            listing.append((as_planned[0].doc_id if as_planned else "", len(as_planned),
                            slice_digest(as_planned)))
        if not more:
            break
    if (kept is not None and marks is not None and not found.problems
            and listing == [(m.first, m.files, m.digest) for m in marks]):
        # The files of the root's last clean run, its records unwritten since: none missing.
        documents, missing = int(kept["documents"]), list[DocState]()
    else:
        documents, missing = _unseen(runtime, namespace, root, seen)
    cursor = PlanCursor(walk=WalkCursor(after=""), problems=found.problems, files=files,
                        ignored=len(found.ignored), seen=seen,
                        check=StoreCheck(namespace, runtime.collection, documents, 0, 0))
    plan = Plan(items=[PlanItem(PlanAction.MISSING, None, s) for s in missing])
    scope = Scope(guard, WalkRules(include=include, exclude=exclude))
    return len(_deletable(RootPlan(root=root, discovery=found, plan=plan), scope, cursor,
                          SyncMode.FULL))


def _chunks(items: Iterator, size: int) -> Iterator[list]:
    chunk: list = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _deletable(result: RootPlan, scope: Scope, cursor: PlanCursor,
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
    escaped, unreadable, gone = triage_missing(
        [i.doc_id for i in result.plan.of(PlanAction.MISSING)], cursor.problems)
    result.escaped, result.kept_unreadable = escaped, unreadable
    if unreadable:
        result.warnings.append(
            f"root {result.root.name}: {len(unreadable)} documents could not be read and were "
            f"kept as indexed, not deleted: {named(unreadable)}")
    if escaped:
        result.warnings.append(
            f"root {result.root.name}: {len(escaped)} documents now lead outside the root "
            f"through a link and are deleted from the index: {named(escaped)}")
    if mode is not SyncMode.FULL:
        return escaped
    gone, result.kept_excluded = outside_filters(result.root, gone, scope.rules)
    if result.kept_excluded:
        result.warnings.append(
            f"root {result.root.name}: {len(result.kept_excluded)} documents are left out by "
            f"--include/--exclude and were kept, not deleted (full mode deletes only documents "
            f"whose files the filters let it see are gone): {named(result.kept_excluded)}")
    return sorted(escaped + guarded(result.root, gone, scope.guard, files=cursor.files,
                                    known=cursor.check.documents))
