"""The default chunk budget follows the embedding model's input limit (issue 11.5).

all-MiniLM-L6-v2 reads 256 word pieces; the old default budget of 400 chunker
tokens had most real chunks cut. By default the chunker now fits every chunk to
the model (counted in its own tokenizer), while an explicit KBSYNC_CHUNK_TOKENS
still wins and its cut chunks are still counted.
"""

from __future__ import annotations

import os

import pytest

from kbsync.text.chunk import ChunkConfig, chunk_budget
from kbsync.ingest.discover import parse_root
from kbsync.embed import clear_service_cache
from kbsync.errors import UsageError
from kbsync.ingest.runner import run_plain
from kbsync.app.runtime import Runtime
from kbsync.settings import Settings
from tests.text.test_chunk_fit import FourCharPieces, real_text


def test_budget_rules() -> None:
    fit = FourCharPieces(256)
    assert chunk_budget(None) == ChunkConfig(400, 60)  # hash, openai, e5: as before
    fitted = chunk_budget(fit)
    assert (fitted.max_tokens, fitted.overlap, fitted.fit) == (160, 24, fit)
    explicit = chunk_budget(fit, tokens=300)
    assert (explicit.max_tokens, explicit.overlap, explicit.fit) == (300, 45, None)
    assert chunk_budget(fit, overlap=0).overlap == 0
    with pytest.raises(UsageError, match="KBSYNC_CHUNK_OVERLAP=200 must be below the chunk budget 160"):
        chunk_budget(fit, overlap=200)


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
def test_default_local_run_cuts_nothing_and_an_explicit_budget_wins(tmp_path, monkeypatch) -> None:
    share = tmp_path / "share"
    share.mkdir()
    (share / "long.md").write_text(real_text(), encoding="utf-8")

    default = _ingest(_settings(tmp_path, monkeypatch), share)
    assert (default["added"], default["failed"]) == (1, 0)
    assert default["embeddings_truncated"] == 0 and default["chunks_kept"] > 0

    # Same store, explicit budget: the fingerprint changes, so the document is redone
    # once, and the chunks the model cuts are counted.
    explicit = _ingest(_settings(tmp_path, monkeypatch, KBSYNC_CHUNK_TOKENS="400"), share)
    assert (explicit["updated"], explicit["failed"]) == (1, 0)
    assert explicit["embeddings_truncated"] > 0
    assert explicit["chunks_kept"] < default["chunks_kept"]
