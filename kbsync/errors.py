"""Typed errors, split by whether an automatic retry can help.

The rule: every concrete kind sits on exactly one of two branches.

- ``TransientError``: a retry **within seconds** may succeed (rate limit, 5xx,
  timeout, store unavailable or locked, a file still being written). Prefect
  task retries (``tasks/options.py::transient``) and the embedding and
  chat clients retry these, and only these. A transient kind may carry
  ``retry_after``: the seconds the server asked us to wait, or None.
- ``PermanentError``: retrying the same call soon cannot fix it (bad input,
  wrong configuration, a store that drifted, a run that ended Failed). Also a
  full disk (:class:`DiskFull`): space does not come back within seconds, and a
  retry would only fill what little is left; a person frees space and re-runs.

Families (:class:`EmbeddingError`, :class:`StoreFailure`, :class:`LLMError`)
group kinds by where they come from, for ``except`` clauses; they are never
raised themselves, so they belong to no branch (nor does the root
:class:`KbsyncError`, which the CLI raises only for a flow state it cannot read).

Every kind lives here, and its ``kind`` (the class name) is its
:class:`ErrorCode`: the string reported in ``failures[].error`` and in the
CLI's ``{"error": {"kind", ...}}``. Codes that are not exceptions
(``EmbeddingFailed``, discovery's ``AmbiguousName``, ...) are members too.
Vendor exceptions are translated into these at the adapter boundary
(``raise StoreError(...) from exc``) so callers never depend on a vendor type.
"""

from __future__ import annotations

from enum import Enum


class ErrorCode(str, Enum):
    """Every error code that appears in JSON; values are the strings of the contract.

    ``str()`` and ``format()`` give the value, so a code prints and serialises
    exactly as the plain string did.
    """

    # the root and the branches (the CLI may report the root for an unreadable flow state)
    KbsyncError = "KbsyncError"
    TransientError = "TransientError"
    PermanentError = "PermanentError"
    UsageError = "UsageError"
    # conversion
    ConversionError = "ConversionError"
    UnsupportedFormat = "UnsupportedFormat"
    EncryptedDocument = "EncryptedDocument"
    CorruptDocument = "CorruptDocument"
    EmptyDocument = "EmptyDocument"
    NoTextLayer = "NoTextLayer"
    FileTooLarge = "FileTooLarge"
    ArchiveBomb = "ArchiveBomb"
    ConversionTimeout = "ConversionTimeout"
    MemoryLimitExceeded = "MemoryLimitExceeded"
    FileChangedDuringRead = "FileChangedDuringRead"
    ConversionInterrupted = "ConversionInterrupted"
    PermissionDenied = "PermissionDenied"
    SecretDetected = "SecretDetected"
    # embedding
    EmbeddingError = "EmbeddingError"
    EmbeddingTransientError = "EmbeddingTransientError"
    EmbeddingPermanentError = "EmbeddingPermanentError"
    EmbeddingOutage = "EmbeddingOutage"
    BatchTooLarge = "BatchTooLarge"
    InputRejected = "InputRejected"
    DimensionMismatch = "DimensionMismatch"
    # store
    StoreFailure = "StoreFailure"
    StoreError = "StoreError"
    StoreUnavailable = "StoreUnavailable"
    StoreDamaged = "StoreDamaged"
    InvalidVector = "InvalidVector"
    StoreDrift = "StoreDrift"
    RelayUntrusted = "RelayUntrusted"
    StoreReadOnly = "StoreReadOnly"
    DiskFull = "DiskFull"
    HomeExposed = "HomeExposed"
    # ingest
    LockHeld = "LockHeld"
    InternalError = "InternalError"
    RootConflict = "RootConflict"
    PermissionsNotCaptured = "PermissionsNotCaptured"
    EmbedderMismatch = "EmbedderMismatch"
    MassDeleteRefused = "MassDeleteRefused"
    OrchestratorUnavailable = "OrchestratorUnavailable"
    RunEndedFailed = "RunEndedFailed"
    FilesFailed = "FilesFailed"
    # query and evaluation
    LLMError = "LLMError"
    LLMNotConfigured = "LLMNotConfigured"
    LLMTransientError = "LLMTransientError"
    LLMPermanentError = "LLMPermanentError"
    QueryFileError = "QueryFileError"
    RetrievalRegression = "RetrievalRegression"
    # serving (kbsync serve)
    ServerBusy = "ServerBusy"
    QueryTimeout = "QueryTimeout"
    # codes that are not exceptions
    EmbeddingFailed = "EmbeddingFailed"  # every chunk of a document fell back (stages)
    AmbiguousName = "AmbiguousName"  # discovery: two files map to one doc_id
    SymlinkOutsideRoot = "SymlinkOutsideRoot"  # discovery: a link leaves the root
    UnreadableEntry = "UnreadableEntry"  # discovery: a directory entry cannot be stat'ed
    Interrupted = "Interrupted"  # the CLI: Ctrl-C (exit 130)

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class KbsyncError(Exception):
    """Base of every error kbsync raises on purpose."""

    @property
    def kind(self) -> ErrorCode:
        """The error's code, as reported in ``failures[].error``: its class name.

        A class without a code of its own (a subclass made outside this module,
        which the house rules forbid) reports its nearest ancestor's.
        """
        for cls in type(self).__mro__:
            code = ErrorCode.__members__.get(cls.__name__)
            if code is not None:
                return code
        raise AssertionError("unreachable: KbsyncError has a code")


class TransientError(KbsyncError):
    """A failure that may succeed when retried within seconds (network, rate limit, 5xx).

    Attributes:
        retry_after: seconds the server asked to wait before the next attempt
            (``Retry-After``), or None when it said nothing.
    """

    retry_after: float | None = None

    def __init__(self, *args: object, retry_after: float | None = None) -> None:
        super().__init__(*args)
        self.retry_after = retry_after


class PermanentError(KbsyncError):
    """A failure that retrying the same call soon cannot fix."""


class UsageError(PermanentError):
    """Bad arguments or configuration: the CLI exits 2."""


# --- conversion -------------------------------------------------------------
class ConversionError(PermanentError):
    """A file could not be turned into Markdown."""


class UnsupportedFormat(ConversionError):
    """No converter handles this file type (counted as ignored, not failed)."""


class EncryptedDocument(ConversionError):
    """The file is password protected."""


class CorruptDocument(ConversionError):
    """The file is damaged or is not what its extension says."""


class EmptyDocument(ConversionError):
    """The file converted to no text at all."""


class NoTextLayer(ConversionError):
    """A PDF with no usable text layer (a scan, or mojibake) that OCR did not read: OCR is
    off (the message says how to turn it on) or found no text."""


class FileTooLarge(ConversionError):
    """The file is over the configured size limit."""


class ArchiveBomb(ConversionError):
    """An Office file whose uncompressed size or ratio exceeds the limits."""


class ConversionTimeout(ConversionError):
    """The converter ran past its wall-clock limit."""


class MemoryLimitExceeded(ConversionError):
    """The converter ran past its memory limit (``KBSYNC_CONVERT_MEMORY_MB``): the file may
    be sound, only too big to convert under that limit."""


class FileChangedDuringRead(TransientError):
    """The file's size or mtime changed while it was being read."""


class ConversionInterrupted(TransientError):
    """The conversion worker was stopped by a signal kbsync does not send (SIGTERM, SIGINT,
    SIGHUP: the run being cancelled, a shutdown), not by the file: the file is not called
    corrupt, and the next run converts it again. (kbsync's own kills, past the time limit,
    are SIGKILL; a native crash is SIGSEGV/SIGBUS/SIGABRT, a ``CorruptDocument``.)"""


class PermissionDenied(ConversionError):
    """The file or directory cannot be read by this process."""


class SymlinkOutsideRoot(ConversionError):
    """A file, as opened, lies outside its root: a link (to it or to a folder above it)
    leads out, e.g. swapped in after discovery. Nothing of it is read."""


class SecretDetected(PermanentError):
    """A document's text holds a secret (a private key, an access key, a password
    assignment: :mod:`kbsync.text.secrets`) and ``KBSYNC_SECRETS`` is ``refuse``: it is not
    indexed. The message names the path, each kind and its line, never the secret.

    Permanent: the same bytes hold the same secret; a person removes the secret, excludes
    the file, or sets ``KBSYNC_SECRETS=redact``.
    """


# --- embedding --------------------------------------------------------------
class EmbeddingError(KbsyncError):
    """Family of embedding failures (never raised itself)."""


class EmbeddingTransientError(EmbeddingError, TransientError):
    """Rate limit, 5xx, timeout or connection failure from an embedding API;
    ``retry_after`` holds the server's Retry-After, if any, and ``status`` the HTTP
    status when the endpoint answered (None: timeout or no connection)."""

    status: int | None = None


class EmbeddingPermanentError(EmbeddingError, PermanentError):
    """Authentication, bad request, unknown model, or a malformed response."""


class BatchTooLarge(EmbeddingPermanentError):
    """The endpoint refuses this many inputs in one request (413, "batch size")."""


class InputRejected(EmbeddingPermanentError):
    """The endpoint refused this request's inputs (400/422 not about the batch size)."""


class EmbeddingOutage(EmbeddingError, TransientError):
    """Every batch of a run failed to embed: the run fails rather than store nothing."""


class DimensionMismatch(PermanentError):
    """A vector's length differs from the collection's dimension."""


# --- store ------------------------------------------------------------------
class StoreFailure(KbsyncError):
    """Family of vector store failures (never raised itself): catch this for "any store
    error", unavailable included."""


class StoreError(StoreFailure, PermanentError):
    """A vector store operation failed permanently."""


class StoreUnavailable(StoreFailure, TransientError):
    """The vector store cannot be reached or is locked by another writer."""


class RelayUntrusted(StoreError):
    """The relay socket's folder, or the process serving it, is not this user's own
    (another user's folder, a folder others can enter, a peer of another uid): its
    answers are refused, so no reader takes another user's store for its own."""


class StoreDamaged(StoreError):
    """A collection's files are damaged (bit rot, a sealed segment removed or changed, a
    panic of the engine reading them): the read fails rather than serve a wrong or partial
    answer. ``kbsync verify`` names the damaged segment; ``kbsync verify --repair`` sets it
    aside and rebuilds what it held from the shares."""


class StoreReadOnly(StoreError):
    """A write on an embedded store whose folder cannot be written (a read-only mount, or
    no write permission). Reads of such a store go through a private copy
    (:mod:`kbsync.store.edge.readonly`); this is raised for writes, and for a read whose
    copy cannot be made."""


class InvalidVector(PermanentError):
    """A vector is not finite, or is all zeros without being flagged."""


class StoreDrift(PermanentError):
    """The store no longer holds what the state records say (see ``kbsync verify``)."""


class DiskFull(PermanentError):
    """Not enough free space under KBSYNC_HOME for the next write; nothing was lost.

    Permanent: space does not come back within seconds, so no automatic retry.
    """


class HomeExposed(PermanentError):
    """``KBSYNC_HOME`` (or a kbsync folder or file in it) is open to other users, is
    another user's, or cannot be checked: kbsync refuses to open it (docs/SECURITY.md).

    Permanent: a person fixes the modes (the message names the command) or sets
    ``KBSYNC_SHARED_GROUP`` to share the home with one group on purpose.
    """


# --- ingest -----------------------------------------------------------------
class LockHeld(TransientError):
    """Another ingest holds the write lock for this collection and namespace."""


class InternalError(PermanentError):
    """An unexpected exception (a kbsync bug or a vendor library's), contained to
    the documents it hit: reported as their failure with a one-line message; the
    traceback goes to the debug log."""


class RootConflict(UsageError):
    """A root NAME is bound to another path in this namespace, or roots overlap."""


class PermissionsNotCaptured(UsageError):
    """A search as another reader (``--as-user``) of a namespace whose documents carry no
    permissions yet (written before they were captured): the next ingest of the named
    roots records them, with nothing converted or embedded again."""


class EmbedderMismatch(UsageError):
    """The configured embedder differs from the one the collection was built with."""


class MassDeleteRefused(PermanentError):
    """Full mode would delete too much of a root; nothing was deleted."""


class OrchestratorUnavailable(TransientError):
    """The Prefect API stopped answering during a run; the run stops within a bound."""


class RunEndedFailed(PermanentError):
    """A run that did its work but ends Failed, carrying its JSON result.

    Prefect resolves a Failed state's data into an exception; a plain dict there
    made the engine log a fake crash (``dict cannot be resolved into an
    exception``). The result travels on this exception instead, and pickles with it.

    Attributes:
        result: the run's JSON result (the ingest summary, the evaluation result).
    """

    def __init__(self, message: str, result: dict | None = None) -> None:
        super().__init__(message)
        self.result = dict(result or {})

    def __reduce__(self):
        return (type(self), (str(self), self.result))


class FilesFailed(RunEndedFailed):
    """An ingest completed but some files failed (exit 3); ``result`` is the summary."""


# --- query and evaluation ---------------------------------------------------
class LLMError(KbsyncError):
    """Family of chat model failures (never raised itself)."""


class LLMNotConfigured(LLMError, UsageError):
    """No chat model is configured (``KBSYNC_LLM_MODEL`` is unset)."""


class LLMTransientError(LLMError, TransientError):
    """Timeout, connection failure, 408/409/429 or 5xx, after every attempt;
    ``retry_after`` holds the server's Retry-After, if any."""


class LLMPermanentError(LLMError, PermanentError):
    """Authentication, unknown model, bad request, or an empty or malformed reply."""


class QueryFileError(UsageError):
    """A query file with bad lines; ``problems`` lists ``(line number, message)``."""

    def __init__(self, path: str, problems: list[tuple[int, str]]) -> None:
        self.path = path
        self.problems = problems
        shown = "; ".join(f"line {n}: {msg}" if n else msg for n, msg in problems[:20])
        more = f" (and {len(problems) - 20} more)" if len(problems) > 20 else ""
        super().__init__(f"{path}: {len(problems)} bad line(s): {shown}{more}")

    def __reduce__(self):
        # Rebuild from (path, problems): the default would call __init__ with the message.
        return type(self), (self.path, self.problems)


class RetrievalRegression(RunEndedFailed):
    """nDCG@10 of a mode dropped past the margin (exit 3); ``result`` is the evaluation."""


# --- serving (kbsync serve) ----------------------------------------------------------
class ServerBusy(TransientError):
    """``kbsync serve`` refused a request: its caller already has the most requests in
    flight that one caller may have, or the server is stopping; retry shortly."""


class QueryTimeout(TransientError):
    """``kbsync serve`` gave up waiting for a request's answer after its budget
    (``KBSYNC_QUERY_TIMEOUT_S`` and a margin); the caller may retry."""
