"""The default chunk budget follows the embedding model's input limit (issues 11.5, 13).

all-MiniLM-L6-v2 reads 256 word pieces. By default the budget is that limit counted
in chunker tokens (256): the model reads each chunk's head and BM25 all of it, which
retrieved best on both eval sets (docs/decisions/chunk-budget.md). KBSYNC_CHUNK_FIT=true
fits every chunk to the model instead (counted in its own tokenizer), so nothing is
cut. An explicit KBSYNC_CHUNK_TOKENS wins over both, and cut chunks are counted.
"""

from __future__ import annotations

import os

import pytest

from kbsync.text.chunk import ChunkConfig, chunk_budget
from kbsync.ingest.discover import parse_root
from kbsync.embed import clear_service_cache
from kbsync.errors import UsageError
from kbsync.ingest.runner import run_plain
from kbsync.runtime import Runtime
from kbsync.settings import Settings
from tests.text.test_chunk_fit import FourCharPieces, real_text


def test_budget_rules() -> None:
    fit = FourCharPieces(256)
    assert chunk_budget(None) == ChunkConfig(400, 60)  # hash, openai, e5: as before
    default = chunk_budget(fit)  # the model's limit in chunker tokens; the model cuts
    assert (default.max_tokens, default.overlap, default.fit) == (256, 38, None)
    fitted = chunk_budget(fit, fit_chunks=True)
    assert (fitted.max_tokens, fitted.overlap, fitted.fit) == (160, 24, fit)
    explicit = chunk_budget(fit, tokens=300, fit_chunks=True)
    assert (explicit.max_tokens, explicit.overlap, explicit.fit) == (300, 45, None)
    assert chunk_budget(fit, overlap=0).overlap == 0
    with pytest.raises(UsageError, match="KBSYNC_CHUNK_OVERLAP=200 must be below the chunk budget 160"):
        chunk_budget(fit, overlap=200, fit_chunks=True)


def _settings(tmp_path, monkeypatch, **env: str) -> Settings:
    for key in list(os.environ):
        if key.startswith("KBSYNC_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("KBSYNC_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KBSYNC_CONVERT_ISOLATION", "false")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return Settings()


def _ingest(settings: Settings, share) -> dict:
    runtime = Runtime.open(settings)
    try:
        return run_plain([parse_root(str(share))], runtime=runtime).to_dict()
    finally:
        runtime.close()
        clear_service_cache()


@pytest.mark.slow
def test_default_run_counts_its_cuts_the_fit_cuts_nothing_and_an_explicit_budget_wins(
        tmp_path, monkeypatch) -> None:
    share = tmp_path / "share"
    share.mkdir()
    (share / "long.md").write_text(real_text(), encoding="utf-8")

    default = _ingest(_settings(tmp_path, monkeypatch), share)
    assert (default["added"], default["failed"]) == (1, 0)
    assert default["embeddings_truncated"] > 0 and default["chunks_kept"] > 0  # counted

    # Same store, fitted chunks: the fingerprint changes, so the document is redone once;
    # more, smaller chunks, none cut.
    fitted = _ingest(_settings(tmp_path, monkeypatch, KBSYNC_CHUNK_FIT="true"), share)
    assert (fitted["updated"], fitted["failed"]) == (1, 0)
    assert fitted["embeddings_truncated"] == 0
    assert fitted["chunks_kept"] > default["chunks_kept"]

    # An explicit budget wins over the fit: redone again, and its cut chunks are counted.
    explicit = _ingest(_settings(tmp_path, monkeypatch, KBSYNC_CHUNK_TOKENS="400",
                                 KBSYNC_CHUNK_FIT="true"), share)
    assert (explicit["updated"], explicit["failed"]) == (1, 0)
    assert explicit["embeddings_truncated"] > 0
    assert explicit["chunks_kept"] < default["chunks_kept"]
