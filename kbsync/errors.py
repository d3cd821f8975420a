"""Typed errors, split by whether retrying can help.

``TransientError`` (rate limits, 5xx, timeouts, store unavailable) is retried by
callers; ``PermanentError`` (bad input, wrong configuration) is reported once.
Vendor exceptions are translated into these at the adapter boundary
(``raise StoreError(...) from exc``) so callers never depend on a vendor type.
"""

from __future__ import annotations


class KbsyncError(Exception):
    """Base of every error kbsync raises on purpose."""

    @property
    def kind(self) -> str:
        """The error's short name, as reported in ``failures[].error``."""
        return type(self).__name__


class TransientError(KbsyncError):
    """A failure that may succeed when retried (network, rate limit, 5xx)."""


class PermanentError(KbsyncError):
    """A failure that retrying with the same input cannot fix."""


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
    """A PDF whose pages hold only images (a scan); OCR is out of scope."""


class FileTooLarge(ConversionError):
    """The file is over the configured size limit."""


class ArchiveBomb(ConversionError):
    """An Office file whose uncompressed size or ratio exceeds the limits."""


class ConversionTimeout(ConversionError):
    """The converter ran past its wall-clock limit."""


class FileChangedDuringRead(TransientError):
    """The file's size or mtime changed while it was being read."""


class PermissionDenied(ConversionError):
    """The file or directory cannot be read by this process."""


# --- embedding --------------------------------------------------------------
class EmbeddingError(KbsyncError):
    """Base for embedding failures."""


class EmbeddingTransientError(EmbeddingError, TransientError):
    """Rate limit, 5xx, timeout or connection failure from an embedding API."""


class EmbeddingPermanentError(EmbeddingError, PermanentError):
    """Authentication, bad request, unknown model, or a malformed response."""


class EmbeddingOutage(EmbeddingError, TransientError):
    """Every batch of a run failed to embed: the run fails rather than store nothing."""


class DimensionMismatch(PermanentError):
    """A vector's length differs from the collection's dimension."""


# --- store ------------------------------------------------------------------
class StoreError(KbsyncError):
    """A vector store operation failed permanently."""


class StoreUnavailable(StoreError, TransientError):
    """The vector store cannot be reached or is locked by another writer."""


class InvalidVector(PermanentError):
    """A vector is not finite, or is all zeros without being flagged."""


class LockHeld(TransientError):
    """Another ingest holds the write lock for this collection and namespace."""


# --- added for data safety on real shares (issues 10, 11) --------------------
class InternalError(PermanentError):
    """An unexpected exception (a kbsync bug or a vendor library's), contained to
    the documents it hit: reported as their failure with a one-line message; the
    traceback goes to the debug log."""


class RootConflict(UsageError):
    """A root NAME is bound to another path in this namespace, or roots overlap."""


class EmbedderMismatch(UsageError):
    """The configured embedder differs from the one the collection was built with."""


class DiskFull(KbsyncError):
    """Not enough free space under KBSYNC_HOME for the next write; nothing was lost."""


class OrchestratorUnavailable(TransientError):
    """The Prefect API stopped answering during a run; the run stops within a bound."""


class StoreDrift(KbsyncError):
    """The store no longer holds what the state records say (see ``kbsync verify``)."""


class RunEndedFailed(KbsyncError):
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


class RetrievalRegression(RunEndedFailed):
    """nDCG@10 of a mode dropped past the margin (exit 3); ``result`` is the evaluation."""
