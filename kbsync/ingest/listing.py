"""A root's listing as its last clean run saw it: a no-op sync reads no document record.

A plan slice reads the state records of its files to compare their size, mtime and
permissions (:func:`kbsync.ingest.classify.plan_files`): at 100,000 files that read was
most of a no-op's time (issue 42). So a run that found a whole root clean (every file
unchanged, or a remembered failure that still holds; nothing written, deleted or
reported as drift), or that leaves it so (it wrote the new and changed files and refreshed
the moved records, every one whole: :func:`kbsync.ingest.runner.wrote_whole`, and had
nothing to heal, repair, forget or delete), keeps, per slice of the root's plan, a
:class:`SliceMark`: the slice's
first doc_id, its file count, a digest of what the walk saw of each file (doc_id, size,
mtime_ns, permission profile and grants) and how many records its files matched. The
marks live in the root's chunk-total record (:data:`kbsync.catalog.state.CHUNK_TOTAL`),
under a key of every setting that decides a plan (:func:`listing_key`).

The next run walks each slice as always; when the slice's mark is the kept one, its
files are planned from the walk alone (:func:`unchanged_plan`), with no record read.

Why that is the plan the records would give. The chunk-total record (and so the marks)
is deleted before any write of a document record (:meth:`StateStore.commit`, ``remove``,
``kbsync remove``, ``verify --repair``'s marks), so while it exists every record of the
root is what the clean run compared; the walk's digest says every file is what that run
saw; the key says the settings are the same. A writing run keeps its marks at the root's
finish, after its last commit, and every record it wrote or refreshed took the size, mtime
and permissions of the walk the marks digest (:mod:`kbsync.ingest.write`): its records are
what a clean run would compare. Remembered failures (:mod:`kbsync.catalog.failed`)
are read as always and must still hold, file by file, or the slice is planned from its
records. What the marks do not cover is checked every run as before: the store check of
the root's points against its total (drift reprocesses the documents; no mark is used
then), discovery's problems (a slice with any is planned from its records), ``--force``
and ``--include``/``--exclude`` (no mark is used or kept).

Tested by ``tests/ingest/test_listing.py``.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from kbsync.catalog.failed import RememberedFailure
from kbsync.catalog.state import stable_hash
from kbsync.ingest.classify import Plan, PlanItem, log_failed_again
from kbsync.models import PlanAction, RootSpec, SourceFile


@dataclass(frozen=True)
class SliceMark:
    """One slice of a clean root's plan: its first doc_id, how many files it held, the
    digest of what the walk saw of them (:func:`slice_digest`) and how many state records
    they matched."""

    first: str
    files: int
    digest: str
    matched: int

    def to_list(self) -> list[Any]:
        """The mark as the record keeps it."""
        return [self.first, self.files, self.digest, self.matched]

    @classmethod
    def from_list(cls, value: Sequence[Any]) -> "SliceMark":
        """A mark :meth:`to_list` wrote."""
        first, files, digest, matched = value
        return cls(str(first), int(files), str(digest), int(matched))


def slice_digest(files: Sequence[SourceFile]) -> str:
    """A digest of what the walk saw of ``files``: each one's doc_id, size, mtime_ns,
    permission profile and grants, in order (~1 us a file)."""
    digest = hashlib.blake2b(digest_size=16)
    for f in files:
        digest.update(f"{f.doc_id}\0{f.size}\0{f.mtime_ns}\0{f.access}\0"
                      f"{','.join(f.access_grants)}\n".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def listing_key(root: RootSpec, failure_key: str, files_per_slice: int | None) -> str:
    """Every setting a plan of ``root`` depends on beside its files and records: where the
    root is, the settings of a conversion and its fingerprint (``failure_key``, which holds
    the run's fingerprint, OCR and size limit; OCR also decides which files discovery keeps)
    and the slice size (the marks are per slice)."""
    return stable_hash({"root": os.fsencode(root.path).hex(), "settings": failure_key,
                        "slice": files_per_slice})[:32]


def kept_marks(record: Mapping[str, Any] | None, key: str) -> tuple[SliceMark, ...] | None:
    """The marks of a root's chunk-total ``record`` when they were kept under ``key``."""
    listing = (record or {}).get("listing")
    if not isinstance(listing, Mapping) or listing.get("key") != key:
        return None
    return tuple(SliceMark.from_list(m) for m in listing.get("slices", ()))


def listing_payload(key: str, marks: Sequence[SliceMark]) -> dict[str, Any]:
    """What the chunk-total record keeps under ``listing``."""
    return {"key": key, "slices": [m.to_list() for m in marks]}


def unchanged_plan(files: Sequence[SourceFile], remembered: Mapping[str, RememberedFailure],
                   failure_key: str) -> Plan | None:
    """The plan of a slice whose mark matched: each file unchanged (no record read: the
    item's ``previous`` is ``None``, there is nothing to compare it with), or failed again
    where its remembered failure holds. ``None`` when a remembered failure of one of the
    files no longer holds: then the slice is planned from its records."""
    plan = Plan()
    items = plan.items
    for source in files:
        record = remembered.get(source.doc_id)
        if record is None:
            items.append(PlanItem(PlanAction.UNCHANGED, source, None))
            continue
        if not record.holds_for(source, failure_key):
            return None
        plan.failures.append(record.failure)
        plan.remembered += 1
        log_failed_again(record)
    return plan


def slice_is_clean(plan: Plan, problems: int, *, once_written: bool = False) -> bool:
    """Whether a slice's plan is one a mark may stand for: every file unchanged with the
    size, mtime and permissions of its record, or failed again as remembered; no discovery
    problem, nothing to hash, heal, convert, forget or delete.

    ``once_written``: whether it will be once a run has done what the plan asks without a
    failure: new and changed files stored (their records take the walk's size, mtime and
    permissions), unchanged ones whose stat or permissions moved refreshed; still nothing
    to heal, repair or forget. A writing run keeps such marks only when every file it
    wrote is written whole (:func:`kbsync.ingest.runner.wrote_whole`)."""
    if problems or plan.remembered != len(plan.failures) or (plan.hashed and not once_written):
        return False
    allowed = _WRITTEN if once_written else (PlanAction.UNCHANGED,)
    for item in plan.items:
        if item.action not in allowed or item.forget_failure or item.repair:
            return False
        if item.file is None or (item.record_moved() and not once_written):
            return False
    return True


_WRITTEN = (PlanAction.UNCHANGED, PlanAction.NEW, PlanAction.CHANGED)
