"""What an ingest step is given: configuration as values, and typed collaborators.

:class:`IngestConfig` is read once from :class:`~kbsync.settings.Settings` at the
edge (the CLI, the flow, the API) and handed down; nothing under ``kbsync.ingest``
reads the environment. :class:`IngestContext` names the live collaborators a
step may use; :class:`kbsync.runtime.Runtime` is the one implementation
(one per process: the embedded engine admits one handle per folder, and the
local model loads once).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from kbsync.embed.base import Embedder
from kbsync.catalog.state import StateStore
from kbsync.models import Document
from kbsync.settings import Settings
from kbsync.store.base import VectorStore
from kbsync.text.chunk import ChunkConfig
from kbsync.text.secrets import SecretPolicy
from kbsync.text.sparse import SparseEncoder

Converter = Callable[..., Document]
"""``converter(path, *, doc_id, max_bytes) -> Document`` (:func:`kbsync.convert.convert`)."""


@dataclass(frozen=True)
class IngestConfig:
    """The settings an ingest reads, as plain values.

    Attributes:
        collection: the chunk collection.
        state_collection: the collection of document state and meta records.
        home: ``KBSYNC_HOME`` (a root must not contain it).
        files_per_batch: files per batch of the stages.
        files_per_slice: files a root's plan holds at a time (:mod:`kbsync.ingest.plan`).
        batches_in_flight: how many batches an executor may run at once.
        max_file_bytes: larger files fail with ``FileTooLarge``.
        disk: the embedded store's folder, whose free space every write books
            first (:mod:`kbsync.ingest.room`); ``None`` against a Qdrant server.
        min_free_bytes: room a write must leave free on ``disk``.
        contextual_text: embed and BM25-encode each chunk with its title and
            heading path in front (:mod:`kbsync.text.context`).
        secrets: what a document whose text holds a secret leads to
            (:mod:`kbsync.text.secrets`).
    """

    collection: str
    state_collection: str
    home: Path
    files_per_batch: int = 32
    files_per_slice: int = 5_000
    batches_in_flight: int = 6
    max_file_bytes: int = 100 * 2**20
    disk: Path | None = None
    min_free_bytes: int = 0
    contextual_text: bool = False
    secrets: SecretPolicy = SecretPolicy.REFUSE

    @classmethod
    def from_settings(cls, settings) -> "IngestConfig":
        """The values of ``settings`` (a :class:`kbsync.settings.Settings`)."""
        return cls(collection=settings.collection, state_collection=settings.state_collection,
                   home=settings.home, files_per_batch=settings.files_per_batch,
                   files_per_slice=settings.plan_slice_files,
                   batches_in_flight=2 * settings.task_workers,
                   max_file_bytes=int(settings.max_file_mb * 2**20),
                   disk=None if settings.qdrant_url else settings.store_path,
                   min_free_bytes=int(settings.min_free_mb * 2**20),
                   contextual_text=settings.contextual_text,
                   secrets=SecretPolicy(settings.secrets))


class PrepareContext(Protocol):
    """What a batch's CPU work (convert -> chunk -> embed) needs, and no store: the
    context of a process that cannot reach the embedded store (a Dask worker's,
    :class:`kbsync.runtime.WorkerRuntime`)."""

    config: IngestConfig
    service: Embedder

    def converter(self) -> Converter:
        """The conversion function (isolated worker processes unless disabled)."""


class IngestContext(PrepareContext, Protocol):
    """The live collaborators of an ingest step."""

    store: VectorStore
    states: StateStore
    chunk_config: ChunkConfig

    @property
    def collection(self) -> str:
        """The chunk collection's name (``config.collection``)."""

    @property
    def fingerprint(self) -> str:
        """Hash of every setting that shapes stored points."""

    @property
    def sparse(self) -> SparseEncoder:
        """The collection's own BM25 encoder (:func:`kbsync.catalog.identity.sparse_encoder`)."""

    @property
    def ocr_key(self) -> str:
        """OCR engine, version, languages and dpi, or ``off``: part of the fingerprint of
        documents that had scanned pages (:func:`kbsync.catalog.state.document_fingerprint`)."""

    def accepts(self, path: Path) -> bool:
        """Whether discovery keeps ``path`` (images only with OCR on)."""

    def ensure_collection(self) -> None:
        """Create the chunk collection, or fail clearly on a dimension mismatch."""

    def check_still_active(self) -> None:
        """Refuse to write when the active collection changed since the context's settings
        were resolved (a rebuild swapped while this run waited for the write lock).

        Raises:
            StoreUnavailable: the logical name now points elsewhere (retrying re-resolves).
        """


class RunContext(IngestContext, Protocol):
    """The context of a whole run started in this process (:func:`kbsync.ingest.runner.run_plain`,
    ``kbsync verify --repair``), with the settings it was opened from: the write lock and the
    store's folder are named by them. A step gets only an :class:`IngestContext`."""

    settings: Settings
