"""A sentence-transformers model run by ONNX Runtime: same tokenizer, same pooling.

The engine does what sentence-transformers does for a Transformer + mean
Pooling + Normalize model, without torch at inference time:

1. the model's own fast tokenizer (``tokenizer.json``), inputs cut at
   ``max_tokens`` word pieces, special tokens included (as ``max_seq_length``);
2. the exported transformer (:mod:`kbsync.embed.onnx_export`) gives the last
   hidden state; a traced graph takes the token ids, a hand-built one
   (:mod:`kbsync.embed.minilm_graph`) the summed embeddings, computed here from
   ``tables``;
3. mean over the attended tokens (the sum divided by the token count, clamped
   at 1e-9), then L2 normalisation (norm clamped at 1e-12), in float32.

Each text is its own run (a batch is tokenized at once, then each text runs
alone): int8 activations are quantized per run, so a vector must not depend on
which texts share its run (with several texts per run, the same text gave
vectors 0.98-0.99 apart), and nothing is padded. On real octave-doc chunks one
text per run was also the fastest: 2.3x the chunks/s of 16 texts per run,
whose padding to the longest costs as much as real tokens.

The texts of a batch run side by side, one single-threaded run per core
(:class:`~kbsync.embed.run_lanes.RunLanes`, which says why and what it gave).

Thread safety: callers share the lanes (``InferenceSession.run`` is thread-safe). The tokenizer is a
private copy used under its own lock (a Hugging Face fast tokenizer shared by
threads raised "Already borrowed", issue 11), so one batch is tokenized while
another runs. Counting (cut inputs, the chunker's fit) uses a separate
:class:`~kbsync.embed.local.PieceCounter`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from kbsync.embed.base import TextKind
from kbsync.embed.onnx_export import INPUT_NAMES
from kbsync.embed.run_lanes import RunLanes

if TYPE_CHECKING:
    from kbsync.embed.minilm_graph import EmbeddingTables


class PieceCount(Protocol):
    """Counts word pieces per text, untruncated (:class:`kbsync.embed.local.PieceCounter`)."""

    def count(self, texts: Sequence[str]) -> list[int]:
        """Word pieces of each text, special tokens included."""
        ...

log = logging.getLogger(__name__)


class OnnxEngine:
    """One ONNX model file + its tokenizer; ``encode`` is thread-safe.

    Args:
        model_file: the exported ONNX file.
        source: the sentence-transformers folder it was exported from (tokenizer).
        max_tokens: word pieces read per input, special tokens included.
        counter: counts word pieces (untruncated) for cut inputs and sorting.
        threads: runs at once (each single-threaded); None = one per core.
        tables: the embedding tables, for a graph whose input is ``embeds``.
    """

    def __init__(self, model_file: Path, source: Path, *, max_tokens: int,
                 counter: PieceCount, threads: int | None = None,
                 tables: EmbeddingTables | None = None) -> None:
        from tokenizers import Tokenizer

        self.lanes = RunLanes(model_file, lanes=threads)
        self.session = self.lanes.session
        self._inputs = {i.name for i in self.session.get_inputs()}
        if "embeds" in self._inputs and tables is None:
            raise ValueError(f"{model_file}: its input is embeddings; pass the tables")
        self._tables = tables
        self.dimension = int(self.session.get_outputs()[0].shape[-1])
        self.max_tokens = max_tokens
        self.counter = counter
        tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
        tokenizer.enable_truncation(max_length=max_tokens)
        tokenizer.no_padding()  # padded here, per sub-batch
        self._tokenizer = tokenizer
        self._tokenizer_lock = threading.Lock()

    def encode(self, texts: list[str], kind: TextKind) -> tuple[list[list[float]], int]:
        """Unit vectors in input order, and how many inputs were cut at ``max_tokens``.

        ``kind`` is unused: the model has no query/passage prefixes.
        """
        truncated = sum(n > self.max_tokens for n in self.counter.count(texts))
        with self._tokenizer_lock:
            encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=True)
        rows = self.lanes.map(lambda e: self.embed_one(e.ids, e.type_ids), encodings)
        vectors = np.stack(rows) if rows else np.empty((0, self.dimension), dtype=np.float32)
        return vectors.tolist(), truncated

    def embed_one(self, ids: Sequence[int], type_ids: Sequence[int]) -> np.ndarray:
        """One run over one tokenized text: its unit vector, float32."""
        arrays = (np.asarray([ids], dtype=np.int64), np.ones((1, len(ids)), dtype=np.int64),
                  np.asarray([type_ids], dtype=np.int64))
        if self._tables is not None:
            feed = {"embeds": self._tables.embeds(arrays[0][0], arrays[2][0])}
        else:
            feed = {k: v for k, v in zip(INPUT_NAMES, arrays) if k in self._inputs}  # pruned inputs
        hidden = self.lanes.run(feed)
        return mean_pool_normalise(hidden, arrays[1])[0]


def mean_pool_normalise(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """sentence-transformers' mean Pooling then Normalize, in float32.

    ``hidden`` is (batch, tokens, dim), ``mask`` (batch, tokens) of 0/1.
    """
    weights = mask[..., None].astype(np.float32)
    summed = (hidden.astype(np.float32) * weights).sum(axis=1)
    pooled = summed / np.clip(weights.sum(axis=1), 1e-9, None)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    return pooled / np.clip(norms, 1e-12, None)
