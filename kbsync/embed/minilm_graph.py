"""A BERT sentence-transformers model (all-MiniLM-L6-v2) as a hand-built ONNX graph, int8
with its outlier channels in fp32: the ``int8-outliers`` precision of
:mod:`kbsync.embed.onnx_export`, the default of ``all-MiniLM-L6-v2-int8``.

Why not the traced graph: ``torch.onnx.export`` + ONNX Runtime's fusions + ``quantize_dynamic``
(the ``int8`` precision) rounds every activation with one int8 scale per tensor, and a few
channels of each layer input carry values far above the rest, so its top-10 lists agree
with the torch model's 0.904 (issue 38). The graph here is the encoder of
:mod:`kbsync.embed.bert_graph` (the one e5 runs), written from the model's safetensors with
no torch, with the :data:`~kbsync.embed.bert_graph.OUTLIER_CHANNELS` largest input channels
(found once, on :data:`CALIBRATION`) of the linear layers that have real outliers
(:data:`MIN_STRETCH`) in a small fp32 MatMul: 0.961, for ~20% of the int8 graph's speed
(docs/models.md#the-int8-backend-default).

The engine (:class:`kbsync.embed.onnx_engine.OnnxEngine`) sums word + position + token-type
embeddings in numpy (:class:`EmbeddingTables`): the graph's input is ``embeds``.

Limits: a BERT with absolute positions and exact GELU (``config.json``); anything else is
refused with :class:`~kbsync.errors.EmbeddingPermanentError`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Container
from pathlib import Path

import numpy as np

from kbsync.embed.bert_graph import BertShape, build_graph, channel_peaks, outlier_channels, save_int8
from kbsync.errors import EmbeddingPermanentError

log = logging.getLogger(__name__)

# Fixed, so the same weights always give the same graph. The outliers are the model's, not
# the text's (as for e5): they sit on the same channels whatever the input.
CALIBRATION = [
    "Debian is a free operating system. Use apt to install packages; the daemon reads its "
    "configuration from /etc at start and logs to the journal.",
    "how do I undo the last commit in git?",
    "git rebase --interactive HEAD~3 lets you squash, reorder or drop commits before you push "
    "them upstream.",
]
# Split a layer only where its largest input channel peaks at >= 3x the 9th largest. By
# measurement (tests/bench/minilm_rank_agreement.py, 669 queries over 240 git-doc chunks;
# chunks/s on 936 octave-doc chunks, rotated, load ~3.7): every layer split (24 of 24): top-10
# overlap with torch 0.966 at 0.77x the unsplit int8 graph's chunks/s; stretch >= 2 (17 layers)
# 0.966 at 0.77x; >= 3 (14) 0.961 [0.957, 0.965] at 0.83-0.87x; >= 4 (9) 0.954 [0.950, 0.958] at
# 0.87x; only the FFN inputs (6) 0.921.
MIN_STRETCH = 3.0
_PARTS = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
          "ao": "attention.output.dense", "aln": "attention.output.LayerNorm",
          "fi": "intermediate.dense", "fo": "output.dense", "oln": "output.LayerNorm"}
_EMBEDDINGS = ("word_embeddings", "position_embeddings", "token_type_embeddings")


def bert_config(source: Path) -> dict:
    """``config.json`` of ``source``, checked to be a BERT the builder writes faithfully.

    Raises:
        EmbeddingPermanentError: unreadable, or another architecture.
    """
    path = source / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EmbeddingPermanentError(f"{path}: unreadable model config: {exc}") from exc
    wanted = {"model_type": "bert", "hidden_act": "gelu", "position_embedding_type": "absolute"}
    wrong = {k: config.get(k, "absolute" if k == "position_embedding_type" else None)
             for k in wanted}
    wrong = {k: v for k, v in wrong.items() if v != wanted[k]}
    if wrong:
        raise EmbeddingPermanentError(f"{path}: {wrong} is not a BERT this graph builds "
                                      f"(needs {wanted})")
    return config


class SafetensorsBert:
    """A BERT's safetensors as :class:`~kbsync.embed.bert_graph.BertWeights`."""

    def __init__(self, source: Path) -> None:
        from safetensors.numpy import load_file

        config = bert_config(source)
        self.shape = BertShape(int(config["hidden_size"]), int(config["num_hidden_layers"]),
                               int(config["num_attention_heads"]), int(config["intermediate_size"]),
                               float(config["layer_norm_eps"]))
        self.tensors = load_file(str(source / "model.safetensors"))

    def _tensor(self, name: str) -> np.ndarray:
        if name.startswith("emb.ln."):
            key = "embeddings.LayerNorm." + {"w": "weight", "b": "bias"}[name[-1]]
        else:
            layer, part, kind = name.split(".")
            key = (f"encoder.layer.{int(layer[1:])}.{_PARTS[part]}."
                   + {"w": "weight", "b": "bias"}[kind])
        return self.tensors[_prefixed(self.tensors, key)].astype(np.float32)

    def f32(self, name: str) -> np.ndarray:
        return self._tensor(name)

    def linear(self, name: str, cols: int) -> np.ndarray:
        weight = self._tensor(name)
        if weight.shape[1] != cols:
            raise EmbeddingPermanentError(f"{name}: weight {weight.shape} has not {cols} inputs")
        return weight


def _prefixed(tensors: Container[str], key: str) -> str:
    """``key`` as stored: some exports prefix every tensor with ``bert.``."""
    return key if key in tensors else f"bert.{key}"


class EmbeddingTables:
    """Word, position and token-type tables (float32) of a BERT's safetensors; reads only
    those three tensors (~47 MB for MiniLM)."""

    def __init__(self, source: Path) -> None:
        from safetensors import safe_open

        with safe_open(str(source / "model.safetensors"), framework="numpy") as handle:
            names = set(handle.keys())
            word, position, token_type = (
                handle.get_tensor(_prefixed(names, f"embeddings.{t}.weight")).astype(np.float32)
                for t in _EMBEDDINGS)
        self.word, self.position, self.token_type = word, position, token_type
        self.dimension = int(word.shape[1])

    def embeds(self, ids: np.ndarray, type_ids: np.ndarray) -> np.ndarray:
        """(1, tokens, hidden) float32: one text's input to the graph, positions from 0."""
        return (self.word[ids] + self.position[: len(ids)] + self.token_type[type_ids])[None]


def build(source: Path, out: Path, *, outliers: bool = True) -> None:
    """Write the int8 graph of ``source`` to ``out`` (with the outlier split unless told not)."""
    from tokenizers import Tokenizer

    weights = SafetensorsBert(source)
    name = source.name
    channels = None
    if outliers:
        tables = EmbeddingTables(source)
        tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
        tokenizer.no_padding()  # tokenizer.json may pad: padding is no text
        texts = (tables.embeds(np.asarray(e.ids), np.asarray(e.type_ids))[0]
                 for e in tokenizer.encode_batch(CALIBRATION))
        channels = outlier_channels(channel_peaks(build_graph(weights, name=name), texts),
                                    min_stretch=MIN_STRETCH)
    save_int8(build_graph(weights, name=name, outliers=channels), out, keep_fp32=False)
