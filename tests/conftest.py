"""Shared fixtures: isolated settings, a hash-embedder runtime, small shares."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample"


@pytest.fixture
def settings(tmp_path, monkeypatch):
    """Settings isolated under tmp_path, hash embeddings (fast, deterministic)."""
    from kbsync.settings import Settings

    for key in list(os.environ):
        if key.startswith("KBSYNC_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("KBSYNC_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KBSYNC_EMBED_PROVIDER", "hash")
    return Settings()


@pytest.fixture
def runtime(settings):
    from kbsync.runtime import Runtime

    rt = Runtime.open(settings)
    yield rt
    rt.close()


def write_tree(root: Path, files: dict[str, str]) -> None:
    """Create text files under root (parents made as needed)."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
