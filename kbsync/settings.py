"""One settings object, read once at the edge and passed down.

Every entry point (the CLI, the Python API, the flows) reads it with
:func:`load_settings`, so each checks it the same way: a bad value is one
:class:`~kbsync.errors.UsageError` line naming the variable, and a misspelt
``KBSYNC_*`` name is warned about once per process. Aiming the settings at the
collection a rebuild made active is the catalog's (:func:`kbsync.catalog.active.resolve`).

Every field maps to a ``KBSYNC_*`` environment variable. Secrets are
``SecretStr`` so they never appear in ``repr``, logs, Prefect parameters or
artifacts. The model is :mod:`kbsync.envmodel`'s, not pydantic-settings': every command
reads the settings first, and pydantic's import and schema were a quarter of a no-op
sync's wall time (issue 42).
"""

from __future__ import annotations

import difflib
import logging
import os
import re
from enum import Enum
from pathlib import Path
from typing import Literal

from kbsync.envmodel import EnvModel, Field, SecretStr, SettingsInvalid
from kbsync.errors import UsageError

__all__ = ["DEFAULT_LOCAL_MODEL", "EmbedProvider", "SecretStr", "Settings", "SettingsInvalid",
           "load_settings"]

log = logging.getLogger(__name__)


class EmbedProvider(str, Enum):
    """Where vectors come from."""

    LOCAL = "local"
    HASH = "hash"
    OPENAI = "openai"


# The bundled MiniLM on ONNX Runtime at int8: 3.9x the chunks/s of the same weights on
# sentence-transformers, same nDCG@10 (docs/models.md). Stores built with the torch
# model record "all-MiniLM-L6-v2" and are refused under this default until it is set back.
DEFAULT_LOCAL_MODEL = "all-MiniLM-L6-v2-int8"
DEFAULT_HASH_DIMENSION = 384


# Upper bounds of the size, time and count settings. Each is far above any real use and far
# below what the code does with the value (bytes in a 64-bit int, a timeout the OS accepts):
# "inf", "1e308" or a 30-digit integer is then one line naming the variable, not an
# OverflowError deep in a run. Non-finite numbers are refused for every field
# (``allow_inf_nan=False``).
MAX_MB = 2**30  # 1 PiB, in MiB: a file size, free space or memory limit
MAX_GB = 2**20  # 1 PiB, in GiB
MAX_TIMEOUT_S = 86_400.0  # a day: a timeout or wait
MAX_COUNT = 1_000_000  # files per batch and other counts with no tighter bound
MAX_TOKENS = 65_536  # a chunk's token budget or overlap, an embedding's dimension
MAX_ATTEMPTS = 100
MAX_QDRANT_COPIES = 1_024  # shards, replicas, acknowledging replicas

# A collection name becomes folder names (the embedded engine) and Qdrant collection names,
# and kbsync adds suffixes of its own to it (``_state``, ``__r<N>_state``, ``__previous``):
# 100 characters leave room for them under the store's 128 (kbsync.store.validate).
COLLECTION_NAME_MAX = 100
_COLLECTION_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_-]{{0,{COLLECTION_NAME_MAX - 1}}}")


def default_model_cache() -> Path:
    """``$XDG_CACHE_HOME/kbsync/models`` (``~/.cache/kbsync/models``): exports are keyed by
    what shapes them, so every store of a user can share them."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "kbsync" / "models"


def _home_not_empty(value: object) -> object:
    """Refuse an empty ``KBSYNC_HOME``: ``Path("")`` is the working folder, which kbsync
    would then fill with its store and advise ``chmod -R`` on."""
    if isinstance(value, str) and not value.strip():
        raise ValueError("it is empty; unset it for the default (.kbsync in the working "
                         "folder) or name a folder")
    return value


def _a_name_the_store_accepts(name: str) -> str:
    """Refuse what the stores cannot hold (a folder name, a Qdrant collection name, with
    kbsync's suffixes added) and the names of kbsync's own companions
    (``<name>_state``, a rebuild's ``<name>__r<N>``, the aliases
    ``<name>__active``/``__previous``): such a setting would read and write another
    collection's records (``remove`` would delete them)."""
    if not _COLLECTION_NAME.fullmatch(name):
        length = f" ({len(name)} here)" if len(name) > COLLECTION_NAME_MAX else ""
        raise ValueError(f"use 1-{COLLECTION_NAME_MAX} letters, digits, '_' or '-', "
                         f"starting with a letter or digit{length}")
    if re.search(r"(_state|__r\d+|__active|__previous)$", name):
        raise ValueError(f"{name!r} is the name of a collection kbsync makes for its own "
                         "use (state records, a rebuild, an alias); use the collection's "
                         "own name (e.g. 'kbsync')")
    return name


class Settings(EnvModel):
    """kbsync configuration (environment variables prefixed ``KBSYNC_``, names
    case-insensitive; unknown names ignored here and warned about by
    :func:`load_settings`; non-finite numbers refused)."""

    env_prefix = "KBSYNC_"

    home: Path = Field(Path(".kbsync"), check_raw=_home_not_empty, description="State, embedded store and cache live here; not empty (an "
                      "empty value would make the working folder the home).")
    shared_group: str | None = Field(
        None, description="Share KBSYNC_HOME with this Unix group on purpose: folders 2770, "
        "files 0660, group-owned (others are still refused); unset = its owner only (0700/0600; "
        "docs/SECURITY.md).")
    qdrant_url: str | None = Field(None, description="Qdrant server URL; unset = embedded engine.")
    qdrant_api_key: SecretStr | None = Field(None, description="API key for the Qdrant server.")
    qdrant_shards: int | None = Field(
        None, ge=1, le=MAX_QDRANT_COPIES, description="Shards of a collection kbsync creates on a Qdrant server; "
        "unset = the server's default (one per node).")
    qdrant_replication_factor: int | None = Field(
        None, ge=1, le=MAX_QDRANT_COPIES, description="Copies of each shard of a new collection; unset = 1.")
    qdrant_write_consistency_factor: int | None = Field(
        None, ge=1, le=MAX_QDRANT_COPIES, description="Replicas that acknowledge each write; unset = 1.")
    qdrant_on_disk_vectors: bool = Field(
        False, description="New collections keep dense vectors and the sparse index on disk "
        "(past ~5M chunk replicas per 32 GiB node; docs/SCALING.md).")
    qdrant_on_disk_payload: bool = Field(
        True, description="New collections keep payloads on disk (payload indexes stay in RAM).")
    qdrant_write_ordering: Literal["weak", "medium", "strong"] = Field(
        "medium", description="Qdrant write ordering of every upsert and delete.")
    collection: str = Field(
        "kbsync", check=_a_name_the_store_accepts, description=f"Collection holding the chunks: 1-{COLLECTION_NAME_MAX} letters, "
        "digits, '_' or '-', starting with a letter or digit.")
    active_of: str | None = Field(
        None, description="Set by kbsync, not by hand: the logical collection name when "
        "`collection` is the physical collection a `kbsync rebuild` made active "
        "(kbsync.catalog.active); write locks are taken on the logical name.")

    embed_provider: EmbedProvider = Field(EmbedProvider.LOCAL, description="local | hash | openai")
    embed_model: str | None = Field(
        None, description="Model name; unset = the provider's default (local: a new embedded "
        "collection of mostly-CJK shares gets multilingual-e5-small, once).")
    embed_base_url: str | None = Field(None, description="OpenAI-compatible endpoint base URL.")
    embed_api_key: SecretStr | None = Field(None, description="Key for the embedding endpoint.")
    embed_dimensions: int | None = Field(None, ge=1, le=MAX_TOKENS,
                                         description="Requested output dimension.")
    embed_batch_size: int = Field(64, ge=1, le=2048, description="Texts per embedding request.")
    embed_timeout_s: float = Field(60.0, gt=0, le=MAX_TIMEOUT_S,
                                     description="Per-request timeout (openai).")
    embed_max_attempts: int = Field(5, ge=1, le=MAX_ATTEMPTS,
                                      description="Attempts per batch before fallback.")
    cache_size_gb: float = Field(4.0, gt=0, le=MAX_GB, description="Embedding cache size bound.")
    model_cache: Path | None = Field(
        None, description="Folder of local models exported on first use (ONNX); unset = "
        "$XDG_CACHE_HOME/kbsync/models (~/.cache/kbsync/models), shared by every KBSYNC_HOME.")

    llm_base_url: str | None = Field(None, description="OpenAI-compatible chat endpoint base "
                                     "URL (MQE, HyDE, ask); unset = OpenAI's.")
    llm_model: str | None = Field(None, description="Chat model; unset = no LLM features.")
    llm_api_key: SecretStr | None = Field(None, description="Key for the chat endpoint.")
    llm_timeout_s: float = Field(30.0, gt=0, le=MAX_TIMEOUT_S,
                                   description="Per-request timeout of the chat model.")
    llm_max_attempts: int = Field(2, ge=1, le=10, description="Attempts per chat request.")

    chunk_tokens: int | None = Field(
        None, ge=16, le=MAX_TOKENS, description="Token budget per chunk; unset = the embedding model's input "
        "limit in chunker tokens (256 for all-MiniLM-L6-v2; 400 for models without one).")
    chunk_fit: bool = Field(
        False, description="Fit every chunk to the embedding model's input limit, counted in "
        "its own tokenizer, so the model cuts nothing (smaller chunks; retrieved worse on the "
        "eval sets). Only when KBSYNC_CHUNK_TOKENS is unset.")
    chunk_overlap: int | None = Field(
        None, ge=0, le=MAX_TOKENS, description="Overlap in tokens between chunks; unset = 15% of the budget.")
    contextual_text: bool = Field(
        True, description="Embed and BM25-encode each chunk with its document title and "
        "heading path in front (the stored text stays the chunk's own).")
    files_per_batch: int = Field(32, ge=1, le=MAX_COUNT, description="Files per Prefect task batch.")
    plan_slice_files: int = Field(
        5_000, ge=1, le=MAX_COUNT, description="Files of a root planned at a time: a root is planned and "
        "processed in slices of this many files in doc_id order, so the plan of a large "
        "share does not grow with it (8 bytes a file are kept across slices).")
    task_runner: Literal["threads", "dask"] = Field(
        "threads", description="How batches run in parallel: threads, or a Dask cluster.")
    task_workers: int = Field(3, ge=1, le=256, description="Parallel batches (threads/workers).")
    dask_address: str | None = Field(None, description="Existing Dask scheduler; unset = local.")
    lock_timeout_s: float = Field(0.0, ge=0, le=MAX_TIMEOUT_S,
                                  description="Wait this long for another writer.")
    convert_isolation: bool = Field(
        True, description="Convert in worker processes with a timeout and a memory limit.")
    convert_workers: int = Field(2, ge=1, le=64, description="Conversion worker processes.")
    convert_timeout_s: float = Field(120.0, gt=0, le=MAX_TIMEOUT_S,
                                      description="Wall-clock limit per file.")
    convert_memory_mb: int = Field(2048, ge=256, le=MAX_MB,
                                   description="Address-space limit per worker.")
    max_file_mb: float = Field(100.0, gt=0, le=MAX_MB,
                               description="Files above this size are refused.")
    secrets: Literal["refuse", "redact"] = Field(
        "refuse", description="A document whose text holds a secret (a private key, an access "
        "key, a password or token assignment; docs/SECURITY.md): refuse = not indexed, "
        "reported as SecretDetected; redact = indexed with each secret replaced by "
        "[REDACTED:<kind>], and a warning naming the kind and line.")
    ocr: bool = Field(
        False, description="OCR scanned PDF pages and PNG/JPEG/TIFF images with Tesseract "
        "(apt-get install tesseract-ocr tesseract-ocr-eng tesseract-ocr-chi-sim).")
    ocr_languages: str = Field("eng+chi_sim", pattern=r"^[A-Za-z0-9_]+(\+[A-Za-z0-9_]+)*$",
                               description="Tesseract languages, joined by '+'.")
    ocr_dpi: int = Field(300, ge=72, le=600, description="Resolution scanned pages are read at.")
    ocr_page_timeout_s: float = Field(60.0, gt=0, le=MAX_TIMEOUT_S,
                                        description="Wall-clock limit per OCR'd page.")
    ocr_max_pages: int = Field(200, ge=1, le=100_000,
                               description="Files with more pages to OCR fail (FileTooLarge) "
                               "before any page is read.")
    min_free_mb: float = Field(
        64.0, ge=0, le=MAX_MB, description="Free space kept under KBSYNC_HOME beyond what a write needs; "
        "a batch that would eat into it stops the run with DiskFull.")
    orchestrator_timeout_s: float = Field(
        60.0, ge=0, le=MAX_TIMEOUT_S, description="A run whose Prefect API stops answering ends within this "
        "many seconds with OrchestratorUnavailable; 0 = wait as long as Prefect retries.")
    query_timeout_s: float = Field(
        10.0, gt=0, le=MAX_TIMEOUT_S, description="Budget of one search query's embedding (and of a HyDE "
        "passage's), all attempts together (openai), and of a search's expansion chat calls "
        "(MQE, HyDE) together: an "
        "endpoint that does not answer within it is named in one line.")

    @property
    def store_path(self) -> Path:
        """Folder of the embedded Qdrant engine."""
        return self.home / "qdrant"

    @property
    def cache_path(self) -> Path:
        """Folder of the embedding disk cache."""
        return self.home / "cache"

    @property
    def model_path(self) -> Path:
        """Folder of local models exported on first use (ONNX; kbsync.embed.onnx_export)."""
        return self.model_cache or default_model_cache()

    @property
    def logical_collection(self) -> str:
        """The collection name as configured (``KBSYNC_COLLECTION``), before resolution."""
        return self.active_of or self.collection

    @property
    def state_collection(self) -> str:
        """Companion collection holding one state record per document."""
        return self.state_collection_of(self.collection)

    @staticmethod
    def state_collection_of(collection: str) -> str:
        """The state collection of ``collection`` (``<collection>_state``): the one spelling.

        Every other module asks here (a rebuild's shadow, a swapped-out previous collection);
        ``tests/arch/test_layers.py`` checks that no module outside ``kbsync/catalog/`` spells
        the name itself.
        """
        return f"{collection}_state"

    @property
    def model_unset(self) -> bool:
        """The local provider with no ``KBSYNC_EMBED_MODEL``: the model in force is kbsync's.

        The one reading of "no model was configured": a new collection's model is then
        chosen from its shares' language (``kbsync.ingest.model_choice``), an existing one
        keeps the model it recorded (:func:`kbsync.catalog.model_keep.model_open`), and a
        rebuild keeps a chosen one; any configured model or other provider turns all three off.
        """
        return self.embed_provider is EmbedProvider.LOCAL and not self.embed_model

    def embed_model_name(self) -> str:
        """The model name in effect, with the provider's default filled in."""
        if self.embed_model:
            return self.embed_model
        if self.model_unset:
            return DEFAULT_LOCAL_MODEL
        if self.embed_provider is EmbedProvider.HASH:
            return f"hash-{self.embed_dimensions or DEFAULT_HASH_DIMENSION}"
        return "text-embedding-3-small"

    def public_dict(self) -> dict:
        """Settings safe to log or show: secrets masked."""
        data = self.model_dump(mode="json")
        for key in ("qdrant_api_key", "embed_api_key", "llm_api_key"):
            if data.get(key):
                data[key] = "**********"
        return data


# KBSYNC_* variables read outside Settings (deployment scripts, the test suite): known, so
# never warned about as typos.
OTHER_VARIABLES = frozenset({
    "KBSYNC_DOCS_ROOT", "KBSYNC_NAMESPACE",  # deployments/github-actions-reindex.yml
    "KBSYNC_TEST_QDRANT_URL", "KBSYNC_TEST_QDRANT_API_KEY", "KBSYNC_TEST_UI_SHOTS",
    "KBSYNC_UPDATE_GOLDEN", "KBSYNC_REAL_SHARES_CACHE", "KBSYNC_EVAL_SHARES",
    # kbsync serve and its clients (kbsync.serve, docs/serving.md), read before any Settings
    "KBSYNC_SERVER", "KBSYNC_TOKEN", "KBSYNC_SERVE_LOG_QUERIES",
})


def known_variables() -> frozenset[str]:
    """Every ``KBSYNC_*`` name kbsync reads: one per Settings field, plus :data:`OTHER_VARIABLES`."""
    return frozenset(f"KBSYNC_{name.upper()}" for name in Settings.model_fields) | OTHER_VARIABLES


def unknown_variables(environ=None) -> list[tuple[str, str | None]]:
    """``(name, closest known name or None)`` for each ``KBSYNC_*`` variable kbsync does not
    read (names compare case-insensitively, as Settings reads them), sorted by name."""
    environ = os.environ if environ is None else environ
    known = known_variables()
    found = []
    for name in sorted(environ):
        upper = name.upper()
        if upper.startswith("KBSYNC_") and upper not in known:
            close = difflib.get_close_matches(upper, sorted(known), n=1, cutoff=0.75)
            found.append((name, close[0] if close else None))
    return found


_warned: set[str] = set()  # names warned about in this process (the CLI, then its flow)


def warn_unknown_variables(environ=None) -> None:
    """One warning line per unknown ``KBSYNC_*`` variable, once per process (a typo is
    otherwise silently ignored, and the run goes on with the default it meant to change)."""
    for name, close in unknown_variables(environ):
        if name in _warned:
            continue
        _warned.add(name)
        hint = f"did you mean {close}? " if close else ""
        log.warning("unknown variable %s is ignored (%ssee docs/reference/configuration.md)",
                    name, hint)


def _shown(value: object) -> str:
    """``repr(value)``, cut to 40 characters of a long text so the line stays readable."""
    if isinstance(value, str) and len(value) > 40:
        return f"{value[:40]!r}…"
    return repr(value)


def settings_message(exc: SettingsInvalid) -> str:
    """``KBSYNC_X='abc' is not valid: <reason>`` for each error of ``exc``."""
    parts = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error.get("loc") else "?"
        name = f"KBSYNC_{field.upper()}"
        value = "" if "key" in field or "input" not in error else f"={_shown(error['input'])}"
        reason = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
        parts.append(f"{name}{value} is not valid: {reason[:1].lower()}{reason[1:]}")
    return "; ".join(parts) or str(exc).splitlines()[0]


def load_settings() -> Settings:
    """The :class:`Settings` of the environment, as every entry point reads them.

    Unknown ``KBSYNC_*`` names are warned about first (once per process). The result
    is the environment as written: aiming it at the active collection is
    :func:`kbsync.catalog.active.resolve`'s.

    Raises:
        UsageError: one line naming each bad variable and the reason (values of key
            variables are never shown).
    """
    warn_unknown_variables()  # a typo would otherwise leave its default in force, unsaid
    try:
        return Settings()
    except SettingsInvalid as exc:
        raise UsageError(settings_message(exc)) from None
