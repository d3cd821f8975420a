"""The live resources of a run: store, state records, embedding service, chunking.

Opened once per process from :class:`Settings` and shared by every batch: the
embedded engine allows one handle per folder, and the local model loads once.
It implements :class:`kbsync.ingest.context.IngestContext`, the typed view the
ingest steps get; ``config`` holds the settings they read, as values.
"""

from __future__ import annotations

import functools
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Generic, Literal, TypeVar, overload

from kbsync.text.chunk import CHUNKER_VERSION, ChunkConfig, chunk_budget
from kbsync.convert import CONVERTER_VERSION, convert, is_supported
from kbsync.convert.ocr import OcrConfig, check_available
from kbsync.embed.base import Embedder
from kbsync.ingest.context import IngestConfig
from kbsync.catalog.identity import sparse_encoder
from kbsync.settings import Settings
from kbsync.text.context import CONTEXT_VERSION
from kbsync.text.secrets import DETECTOR_VERSION
from kbsync.text.sparse import SparseEncoder
from kbsync.catalog.state import StateStore, fingerprint
from kbsync.store import VectorStore, open_store
from kbsync.catalog.schema import (CHUNK_BOOL_INDEXES, CHUNK_INDEXES, CHUNK_INTEGER_INDEXES,
                                   PAYLOAD_VERSION)
from kbsync.models import Document

if TYPE_CHECKING:
    from kbsync.convert.isolate import IsolatedConverter

log = logging.getLogger(__name__)

S = TypeVar("S", bound=Embedder | None)
"""A runtime's embedding service: ``Embedder``, or ``None`` when opened without one."""


def ocr_config(settings: Settings) -> OcrConfig:
    """The OCR settings as values (``KBSYNC_OCR*``)."""
    return OcrConfig(enabled=settings.ocr, languages=settings.ocr_languages,
                     dpi=settings.ocr_dpi, page_timeout_s=settings.ocr_page_timeout_s,
                     max_pages=settings.ocr_max_pages)


class ConverterPool:
    """The conversion function of one process: isolated worker processes unless disabled.

    The pool starts on first use (workers preload the converters, ~5 s), so
    runs with nothing to convert never pay for it. In-process conversion is
    called from several task threads at once: markitdown's converter objects
    keep no per-call state, and pymupdf (which sets MuPDF up single-threaded)
    never releases the GIL in its bindings, so each MuPDF call runs alone
    (16 real PDFs converted on 4 threads gave the same Markdown as in turn).
    """

    def __init__(self, settings: Settings, *, workers: int | None = None) -> None:
        self._settings = settings
        self._workers = workers or settings.convert_workers
        self._isolated: IsolatedConverter | None = None
        self._lock = threading.Lock()

    def get(self) -> Callable[..., Document]:
        """``convert(path, *, doc_id, max_bytes) -> Document``, isolated or in process,
        with the OCR settings bound when OCR is on."""
        bind = ((lambda f: functools.partial(f, ocr=ocr_config(self._settings)))
                if self._settings.ocr else (lambda f: f))
        if not self._settings.convert_isolation:
            return bind(convert)
        with self._lock:
            if self._isolated is None:
                from kbsync.convert.isolate import IsolatedConverter

                self._isolated = IsolatedConverter(
                    workers=self._workers, timeout_s=self._settings.convert_timeout_s,
                    memory_mb=self._settings.convert_memory_mb)
            return bind(self._isolated.convert)

    def close(self) -> None:
        """Stop the conversion workers (a later :meth:`get` starts new ones)."""
        with self._lock:
            isolated, self._isolated = self._isolated, None
        if isolated is not None:
            isolated.close()


@dataclass
class Runtime(Generic[S]):
    """Everything a stage needs besides its batch.

    A ``Runtime[Embedder]`` (:meth:`open`'s default) is an
    :class:`~kbsync.ingest.context.IngestContext`; one opened without an embedder
    (``service`` None: stats, verify) serves only what reads the store.
    """

    settings: Settings
    store: VectorStore
    states: StateStore
    service: S  # None when opened without one (stats, verify)
    chunk_config: ChunkConfig
    config: IngestConfig = field(init=False)
    _converters: ConverterPool = field(init=False, repr=False)
    _sparse: dict[str, SparseEncoder] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.config = IngestConfig.from_settings(self.settings)
        self._converters = ConverterPool(self.settings)
        check_available(ocr_config(self.settings))  # KBSYNC_OCR=true without Tesseract: exit 2

    def converter(self) -> Callable[..., Document]:
        """The conversion function (see :class:`ConverterPool`)."""
        return self._converters.get()

    def accepts(self, path: Path) -> bool:
        """Whether discovery keeps ``path`` (images only with OCR on)."""
        return is_supported(path, ocr=self.settings.ocr)

    @functools.cached_property
    def ocr_key(self) -> str:
        """OCR engine, version, languages and dpi (``off``): enters the fingerprint of the
        documents that had scanned pages only (:func:`state.document_fingerprint`)."""
        return ocr_config(self.settings).key()

    @property
    def collection(self) -> str:
        """The chunk collection's name."""
        return self.settings.collection

    @property
    def sparse(self) -> SparseEncoder:
        """The collection's own BM25 encoder (:func:`identity.sparse_encoder`), read once
        per collection name: a collection keeps the encoder it was built with until it
        is rebuilt."""
        name = self.collection
        if name not in self._sparse:
            self._sparse[name] = sparse_encoder(self.states, self.store, name)
        return self._sparse[name]

    @property
    def fingerprint(self) -> str:
        """Hash of every setting that shapes stored points (see :func:`state.fingerprint`)."""
        # The fit (the model's input limit) only enters when active, so stores built
        # without one keep their fingerprints.
        fit = {"chunk_fit": self.chunk_config.fit.name} if self.chunk_config.fit else {}
        # Likewise contextual text: only named when on (a change reprocesses every document).
        context = {"contextual": CONTEXT_VERSION} if self.config.contextual_text else {}
        service = self._embedder()
        return fingerprint(
            converter=CONVERTER_VERSION,
            chunker=CHUNKER_VERSION,
            chunk_tokens=self.chunk_config.max_tokens,
            chunk_overlap=self.chunk_config.overlap,
            chunk_max_chars=self.chunk_config.max_chars,
            sparse=self.sparse.version,
            payload=PAYLOAD_VERSION,  # new filter fields: points are rewritten once
            # what the secret screen found and did shapes the text: a new table or policy
            # screens every stored document once more (kbsync.text.secrets)
            secrets=f"{DETECTOR_VERSION}:{self.config.secrets.value}",
            provider=service.provider,
            model=service.model,
            dimension=service.dimension,
            **fit,
            **context,
        )

    def embedding_info(self) -> dict:
        """Provider, model and dimension, as shown by ``kbsync stats``."""
        service = self._embedder()
        return {"provider": service.provider, "model": service.model,
                "dimension": service.dimension}

    def ensure_collection(self) -> None:
        """Create the chunk collection (dense + BM25 sparse vectors), or fail clearly on a
        dimension mismatch."""
        self.store.ensure_collection(self.collection, dimension=self._embedder().dimension,
                                     keyword_indexes=CHUNK_INDEXES, sparse=True,
                                     bool_indexes=CHUNK_BOOL_INDEXES,
                                     integer_indexes=CHUNK_INTEGER_INDEXES)

    def check_still_active(self) -> None:
        """Refuse to write when the active collection changed since ``settings`` were
        resolved (:func:`kbsync.catalog.active.check_still_active`)."""
        from kbsync.catalog.active import check_still_active

        check_still_active(self.settings, self.store)

    def _embedder(self) -> Embedder:
        """``service``, for what describes or writes vectors.

        Raises:
            RuntimeError: the runtime was opened without one (``with_embedder=False``).
        """
        service: Embedder | None = self.service
        if service is None:
            raise RuntimeError("this Runtime was opened without an embedder (with_embedder=False)")
        return service

    @overload
    @classmethod
    def open(cls, settings: Settings, *, with_embedder: Literal[True] = ...,
             serve_readers: bool = ...) -> Runtime[Embedder]: ...

    @overload
    @classmethod
    def open(cls, settings: Settings, *, with_embedder: bool,
             serve_readers: bool = ...) -> Runtime[Embedder | None]: ...

    @classmethod
    def open(cls, settings: Settings, *, with_embedder: bool = True,
             serve_readers: bool = False) -> Runtime[Any]:
        """Open the store and build the embedding service described by ``settings``.

        ``serve_readers``: see :func:`kbsync.store.open_store` (the flows set it).
        """
        from kbsync.embed import build_embedding_service

        store = open_store(settings, serve_readers=serve_readers)
        service = build_embedding_service(settings) if with_embedder else None
        # Runtime, not cls: the type parameter follows the service built here.
        return Runtime(settings=settings, store=store,
                       states=StateStore(store, settings.state_collection), service=service,
                       chunk_config=chunk_budget(service.input_fit() if service else None,
                                                 tokens=settings.chunk_tokens,
                                                 overlap=settings.chunk_overlap,
                                                 contextual=settings.contextual_text,
                                                 fit_chunks=settings.chunk_fit))

    def close(self) -> None:
        """Release the store handle and stop the conversion workers."""
        self._converters.close()
        self.store.close()


@dataclass
class WorkerRuntime:
    """What :func:`kbsync.ingest.steps.prepare` needs, and no store: the runtime of a
    process that converts, chunks and embeds for the process that writes (a Dask
    worker process; the embedded store admits only the writer's process).

    Its embedding service is built from the same settings as the writer's, so it
    computes the same vectors (and shares the on-disk cache, which is process-safe).
    One conversion worker: the process runs one batch at a time.
    """

    settings: Settings
    service: Embedder
    config: IngestConfig = field(init=False)
    _converters: ConverterPool = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.config = IngestConfig.from_settings(self.settings)
        self._converters = ConverterPool(self.settings, workers=1)

    def converter(self) -> Callable[..., Document]:
        """The conversion function (see :class:`ConverterPool`)."""
        return self._converters.get()

    @classmethod
    def open(cls, settings: Settings) -> "WorkerRuntime":
        """Build the embedding service described by ``settings`` (opens no store)."""
        from kbsync.embed import build_embedding_service

        return cls(settings=settings, service=build_embedding_service(settings))

    def close(self) -> None:
        """Stop the conversion workers."""
        self._converters.close()
