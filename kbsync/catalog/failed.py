"""Remembered failures: a file that failed for its own content is not converted again
until it changes (issue 42).

On a real share one file almost always fails for a reason that holds until the file does
(a secret in it, a corrupt PDF). Without a memory every run converts it again, and in a
sync with nothing else to do that alone starts the isolated converter pool. So such a
failure is kept as a meta record (:data:`FAILED_FILE`) of the state collection, one per
(namespace, doc_id), holding the file's size and mtime_ns, a key of the settings that
shape a conversion (:func:`failure_key`) and the failure as it was reported. The plan
(:func:`kbsync.ingest.classify.plan_files`) reports a file whose stat and key still match
as failed again, with the same doc_id, code and message, and converts nothing.

Only :data:`REMEMBERED` codes are kept: those the same bytes under the same settings give
every time. Timeouts, memory limits, interruptions, ``PermissionDenied``,
``FileChangedDuringRead``, internal, embedding and store errors are retried every run.

Invariants (a crash anywhere costs at worst one conversion more, never a wrong skip):

- a record is written only after its failure is known, by the write step of the batch
  that converted the file (:func:`kbsync.ingest.steps.write`);
- a record the plan found stale (the file changed, the settings changed, ``--force``) is
  deleted by that batch's write step before any of its documents is committed; a record
  that no longer matches is never trusted meanwhile;
- a record whose file the root's walk no longer sees (deleted, now ignored) is deleted
  when the root finishes (:func:`kbsync.ingest.steps.finish_root`), unless the run's
  ``--include``/``--exclude`` left part of the root unlooked at;
- a file indexed before keeps its points and record when it now fails, as any failure;
- ``kbsync remove`` of a share or a namespace deletes its records (:func:`forget_all`);
- every write of a record deletes the chunk totals of its roots first, whose kept listing
  stands for the remembered failures of a clean run (:mod:`kbsync.ingest.listing`).

Full mode (the nightly mirror) does not retry them: it differs from incremental mode only in
what it deletes. ``--force`` retries every one.

Tested by ``tests/ingest/test_remembered_failures.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from kbsync.catalog.state import META_KEY, StateStore, stable_hash, utc_now
from kbsync.errors import ErrorCode
from kbsync.models import Failure, SourceFile
from kbsync.store.base import Filter

FAILED_FILE = "failed-file"
"""Meta kind of a remembered failure, keyed by (namespace, doc_id)."""

REMEMBERED = frozenset({
    ErrorCode.SecretDetected, ErrorCode.CorruptDocument, ErrorCode.EncryptedDocument,
    ErrorCode.UnsupportedFormat, ErrorCode.EmptyDocument, ErrorCode.NoTextLayer,
    ErrorCode.FileTooLarge, ErrorCode.ArchiveBomb,
})
"""The codes a file's own bytes cause, the same on every run under the same settings."""


def failure_key(fingerprint: str, ocr_key: str, max_bytes: int) -> str:
    """Hash of the settings that decide whether a conversion fails: the run's fingerprint
    (converter, chunker, secret screen and policy, embedder), the OCR settings (a page
    without text) and the size limit (``FileTooLarge``). Any change retries every file."""
    return stable_hash({"base": fingerprint, "ocr": ocr_key, "max_bytes": max_bytes})[:32]


@dataclass(frozen=True)
class RememberedFailure:
    """A file's remembered failure: what was reported, and the stat and settings it holds for."""

    failure: Failure
    root: str
    size: int
    mtime_ns: int
    key: str
    failed_at: str = ""

    def holds_for(self, source: SourceFile, key: str) -> bool:
        """Whether ``source`` is the file that failed, unchanged, under the same settings."""
        return (self.size, self.mtime_ns, self.key) == (source.size, source.mtime_ns, key)

    def to_payload(self, namespace: str) -> dict[str, Any]:
        """The meta record's payload (no ``namespace`` key: namespace reads skip it)."""
        return {"failed_namespace": namespace, "failed_root": self.root,
                "failed_doc_id": self.failure.doc_id, "path": self.failure.path,
                "error": self.failure.error.value, "message": self.failure.message,
                "size": self.size, "mtime_ns": self.mtime_ns, "key": self.key,
                "failed_at": self.failed_at or utc_now()}

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> "RememberedFailure":
        """The record :meth:`to_payload` wrote."""
        failure = Failure(payload["failed_doc_id"], payload["path"], payload["error"],
                          payload["message"])
        return cls(failure, payload["failed_root"], int(payload["size"]),
                   int(payload["mtime_ns"]), payload["key"], payload.get("failed_at", ""))


def is_remembered(code: ErrorCode) -> bool:
    """Whether a failure with ``code`` is kept (:data:`REMEMBERED`)."""
    return code in REMEMBERED


def load(states: StateStore, namespace: str, root: str) -> dict[str, RememberedFailure]:
    """The remembered failures of ``root``, by doc_id: one index count when there are none
    (every run of a share without one), one filtered read otherwise."""
    if not states.count_meta(FAILED_FILE):
        return {}
    records = states.read_meta(FAILED_FILE, failed_namespace=namespace, failed_root=root)
    return {r["failed_doc_id"]: RememberedFailure.from_payload(r) for r in records}


def remember(states: StateStore, namespace: str, records: Iterable[RememberedFailure]) -> None:
    """Keep ``records`` (each replaces the doc's earlier one). Their roots' chunk totals
    go first: a root's kept listing stands for its remembered failures too
    (:mod:`kbsync.ingest.listing`)."""
    records = list(records)
    for root in sorted({r.root for r in records}):
        states.forget_chunk_totals(namespace, root)
    for record in records:
        states.write_meta(FAILED_FILE, (namespace, record.failure.doc_id),
                          record.to_payload(namespace))


def forget(states: StateStore, namespace: str, doc_ids: Iterable[str]) -> None:
    """Delete the remembered failures of ``doc_ids`` (those without one: nothing), after
    the namespace's chunk totals (a doc_id does not name its root), as :func:`remember`."""
    doc_ids = list(doc_ids)
    if doc_ids:
        states.forget_chunk_totals(namespace)
    states.forget_meta(FAILED_FILE, [(namespace, doc_id) for doc_id in doc_ids])


def forget_all(states: StateStore, namespace: str, root: str | None = None) -> None:
    """Delete every remembered failure of ``root`` (every root's: ``None``) of
    ``namespace``: what removing a share or a namespace does (:mod:`kbsync.ingest.remove`)."""
    if states.store.collection_dimension(states.collection) is None:
        return
    states.forget_chunk_totals(namespace, root)
    states.store.delete(states.collection, Filter.where(
        doc_id=f"<kbsync:{FAILED_FILE}>", **{META_KEY: FAILED_FILE}, failed_namespace=namespace,
        **({"failed_root": root} if root is not None else {})))
