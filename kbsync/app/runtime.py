"""The live resources of a run: store, state records, embedding service, chunking.

Opened once per process from :class:`Settings` and shared by every batch: the
embedded engine allows one handle per folder, and the local model loads once.
It implements :class:`kbsync.ingest.context.IngestContext`, the typed view the
ingest steps get; ``config`` holds the settings they read, as values.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from kbsync.text.chunk import CHUNKER_VERSION, ChunkConfig, chunk_budget
from kbsync.convert import CONVERTER_VERSION, convert
from kbsync.embed.base import Embedder
from kbsync.ingest.context import IngestConfig
from kbsync.settings import Settings
from kbsync.text.context import CONTEXT_VERSION
from kbsync.text.sparse import SPARSE_VERSION
from kbsync.ingest.state import StateStore, fingerprint
from kbsync.store import VectorStore, open_store
from kbsync.ingest.write import (CHUNK_BOOL_INDEXES, CHUNK_INDEXES, CHUNK_INTEGER_INDEXES,
                                 PAYLOAD_VERSION)
from kbsync.models import Document

if TYPE_CHECKING:
    from kbsync.convert.isolate import IsolatedConverter

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    """Everything a stage needs besides its batch."""

    settings: Settings
    store: VectorStore
    states: StateStore
    service: Embedder | None  # None when opened without one (stats, verify)
    chunk_config: ChunkConfig
    config: IngestConfig = field(init=False)
    _converter: IsolatedConverter | None = field(default=None, repr=False)
    _converter_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.config = IngestConfig.from_settings(self.settings)

    def converter(self) -> Callable[..., Document]:
        """The conversion function: isolated worker processes unless disabled.

        The pool starts on first use (workers preload the converters, ~5 s), so
        runs with nothing to convert never pay for it. In-process conversion is
        called from several task threads at once: markitdown's converter objects
        keep no per-call state, and pymupdf (which sets MuPDF up single-threaded)
        never releases the GIL in its bindings, so each MuPDF call runs alone
        (16 real PDFs converted on 4 threads gave the same Markdown as in turn).
        """
        if not self.settings.convert_isolation:
            return convert
        with self._converter_lock:
            if self._converter is None:
                from kbsync.convert.isolate import IsolatedConverter

                self._converter = IsolatedConverter(
                    workers=self.settings.convert_workers,
                    timeout_s=self.settings.convert_timeout_s,
                    memory_mb=self.settings.convert_memory_mb)
            return self._converter.convert

    @property
    def collection(self) -> str:
        """The chunk collection's name."""
        return self.settings.collection

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
            sparse=SPARSE_VERSION,
            payload=PAYLOAD_VERSION,  # new filter fields: points are rewritten once
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

    def _embedder(self) -> Embedder:
        """``service``, for what describes or writes vectors.

        Raises:
            RuntimeError: the runtime was opened without one (``with_embedder=False``).
        """
        if self.service is None:
            raise RuntimeError("this Runtime was opened without an embedder (with_embedder=False)")
        return self.service

    @classmethod
    def open(cls, settings: Settings, *, with_embedder: bool = True,
             serve_readers: bool = False) -> "Runtime":
        """Open the store and build the embedding service described by ``settings``.

        ``serve_readers``: see :func:`kbsync.store.open_store` (the flows set it).
        """
        from kbsync.embed import build_embedding_service

        store = open_store(settings, serve_readers=serve_readers)
        service = build_embedding_service(settings) if with_embedder else None
        return cls(settings=settings, store=store,
                   states=StateStore(store, settings.state_collection), service=service,
                   chunk_config=chunk_budget(service.input_fit() if service else None,
                                             tokens=settings.chunk_tokens,
                                             overlap=settings.chunk_overlap,
                                             contextual=settings.contextual_text))

    def close(self) -> None:
        """Release the store handle and stop the conversion workers."""
        if self._converter is not None:
            self._converter.close()
            self._converter = None
        self.store.close()
