"""The plan rule: files on disk classified against their state records. Writes nothing.

A document is *unchanged* only when its record has the same fingerprint
(:func:`kbsync.catalog.state.expected_fingerprint`), status ``ok`` and either the same
size and mtime (no hashing) or, failing that, the same content hash. A file whose
remembered failure still holds is not planned at all: it fails again, unconverted
(:mod:`kbsync.catalog.failed`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import AbstractSet, Mapping, Sequence

from kbsync.catalog.failed import RememberedFailure
from kbsync.catalog.state import OCR_OFF, REPAIR_FINGERPRINT, expected_fingerprint
from kbsync.errors import ErrorCode, SymlinkOutsideRoot
from kbsync.ingest.discover import hash_file
from kbsync.ingest.report import short_message
from kbsync.models import DocState, DocStatus, Failure, PlanAction, SourceFile

log = logging.getLogger(__name__)


@dataclass(slots=True)  # one per file of a root's plan
class PlanItem:
    """One file and what to do with it."""

    action: PlanAction
    file: SourceFile | None  # None for MISSING
    previous: DocState | None
    repair: bool = False  # reprocessed because its points no longer match the record
    # a remembered failure that no longer holds (the file or the settings changed, --force):
    # the batch's write step deletes it before committing (kbsync.catalog.failed)
    forget_failure: bool = False

    @property
    def doc_id(self) -> str:
        """The document's id."""
        return self.file.doc_id if self.file else self.previous.doc_id  # type: ignore[union-attr]

    def record_moved(self) -> bool:
        """Whether the file's size, mtime or permissions differ from its record's (so
        finishing it writes the record); False without a file or a record to compare."""
        file, previous = self.file, self.previous
        if file is None or previous is None:
            return False
        access = file.access if file.access is not None else previous.access
        return (file.size, file.mtime_ns, access) != (previous.size, previous.mtime_ns,
                                                      previous.access)


@dataclass
class Plan:
    """The diff between the files on disk and the state in the store."""

    items: list[PlanItem] = field(default_factory=list)
    hashed: int = 0
    # files that could not be hashed, and those failed again unconverted (``remembered``)
    failures: list[Failure] = field(default_factory=list)
    remembered: int = 0  # failures of files unchanged since they failed (kbsync.catalog.failed)

    def of(self, action: PlanAction) -> list[PlanItem]:
        """Items with the given action, in doc_id order."""
        return [i for i in self.items if i.action is action]

    def counts(self) -> dict[str, int]:
        """Number of items per action."""
        return {a.value: len(self.of(a)) for a in PlanAction}


def classify(previous: DocState | None, content_hash: str | None, *,
             same_settings: bool) -> PlanAction:
    """The plan rule, for a file and for a text given through the API alike.

    No record: ``new``. The same settings and the same content hash: ``unchanged``, or
    ``heal`` when the record is ``partial`` (only its flagged chunks are embedded again).
    Anything else: ``changed``. ``same_settings`` is the caller's: a file's compares the
    fingerprint its record expects (OCR included) and is false when forced or repaired.
    """
    if previous is None:
        return PlanAction.NEW
    if same_settings and content_hash == previous.content_hash:
        return PlanAction.HEAL if previous.status is DocStatus.PARTIAL else PlanAction.UNCHANGED
    return PlanAction.CHANGED


def plan_files(
    files: Sequence[SourceFile],
    states: Mapping[str, DocState],
    *,
    fingerprint: str,
    ocr_key: str = OCR_OFF,
    force: bool = False,
    repair: AbstractSet[str] = frozenset(),
    remembered: Mapping[str, RememberedFailure] | None = None,
    failure_key: str = "",
) -> Plan:
    """Classify files as new, changed, unchanged or heal, and records as missing.

    A file is read (hashed) only when it has no record, its size or mtime
    differ from the record, or the settings fingerprint changed (or ``force``); for a
    document that had scanned pages the fingerprint includes ``ocr_key``
    (:func:`kbsync.catalog.state.document_fingerprint`).
    ``heal`` is an unchanged file whose record is ``partial``: only its flagged
    chunks need embedding again. Returned items carry ``content_hash``.
    A recorded document in ``repair`` (its points no longer match its record),
    or whose record carries :data:`REPAIR_FINGERPRINT`, is ``changed`` with
    ``repair=True`` whatever its bytes.

    A file not unchanged whose ``remembered`` failure still holds for its stat and
    ``failure_key`` is neither read nor planned: it is one of ``failures`` again, as
    reported then, counted in ``remembered``, with one warning. Under ``force`` or a
    repair it is planned as any file; then, as when its record no longer holds, the item
    carries ``forget_failure`` (:mod:`kbsync.catalog.failed`).
    """
    plan = Plan()
    memory = _Memory(remembered or {}, failure_key, retry=force)
    seen: set[str] = set()
    items, get = plan.items, states.get  # once, not once a file (100,000 in a no-op)
    for source in files:
        seen.add(source.doc_id)
        previous = get(source.doc_id)
        if previous is None:
            if memory.failed_again(source, plan):
                continue
            hashed = _hashed(source, plan)
            if hashed is not None:
                items.append(PlanItem(PlanAction.NEW, hashed, None,
                                      forget_failure=memory.stale(source.doc_id)))
            continue
        repairing = source.doc_id in repair or previous.fingerprint == REPAIR_FINGERPRINT
        same_settings = (not force and not repairing and previous.fingerprint
                         == expected_fingerprint(previous, fingerprint, ocr_key))
        if (same_settings and previous.size == source.size
                and previous.mtime_ns == source.mtime_ns):
            source = source.with_hash(previous.content_hash)  # stat check: not read
        else:
            if not repairing and memory.failed_again(source, plan):
                continue  # its old version stays indexed, as after the failure itself
            hashed = _hashed(source, plan)
            if hashed is None:
                continue
            source = hashed
        action = classify(previous, source.content_hash, same_settings=same_settings)
        items.append(PlanItem(action, source, previous, repair=repairing,
                              forget_failure=memory.stale(source.doc_id)))
    for doc_id in sorted(set(states) - seen):
        plan.items.append(PlanItem(PlanAction.MISSING, None, states[doc_id]))
    return plan


@dataclass(frozen=True)
class _Memory:
    """The remembered failures of a plan's files, and whether the run retries them all."""

    records: Mapping[str, RememberedFailure]
    key: str
    retry: bool

    def failed_again(self, source: SourceFile, plan: Plan) -> bool:
        """Whether ``source`` fails again unconverted (added to ``plan.failures``, warned)."""
        record = self.records.get(source.doc_id)
        if self.retry or record is None or not record.holds_for(source, self.key):
            return False
        plan.failures.append(record.failure)
        plan.remembered += 1
        log_failed_again(record)
        return True

    def stale(self, doc_id: str) -> bool:
        """Whether ``doc_id`` has a record that no longer holds (the file goes on)."""
        return doc_id in self.records


def log_failed_again(record: RememberedFailure) -> None:
    """The INFO line of a file failed again unconverted: the run's report already gives
    every failed file its one WARNING line, and its count line says how many were
    remembered and that --force retries them."""
    failure = record.failure
    log.info("%s: %s, unchanged since it failed at %s: not converted again "
             "(`kbsync ingest --force` retries it): %s", failure.doc_id, failure.error.value,
             record.failed_at or "an earlier run", short_message(failure.to_dict(), None))


def _hashed(source: SourceFile, plan: Plan) -> SourceFile | None:
    """``source`` with its content hash, or ``None`` (reported) when unreadable.

    An unreadable file keeps its previous version and state; the next run retries.
    """
    try:
        digest = hash_file(source.path, source.root_path)
    except OSError as exc:
        plan.failures.append(Failure(source.doc_id, source.display, ErrorCode.PermissionDenied,
                                     f"{source.display}: cannot read: {exc.strerror or exc}"))
        return None
    except SymlinkOutsideRoot as exc:  # swapped in after discovery: never read
        plan.failures.append(Failure(source.doc_id, source.display, exc.kind, str(exc)))
        return None
    plan.hashed += 1
    return source.with_hash(digest)
