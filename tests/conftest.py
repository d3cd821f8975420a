"""Shared fixtures: isolated settings, a hash-embedder runtime, small shares."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture
def settings(tmp_path, monkeypatch):
    """Settings isolated under tmp_path, hash embeddings (fast, deterministic)."""
    from kbsync.settings import Settings

    for key in list(os.environ):
        if key.startswith("KBSYNC_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("KBSYNC_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KBSYNC_EMBED_PROVIDER", "hash")
    # In-process conversion keeps these tests fast; the isolated default (worker processes)
    # is exercised by the flow, CLI and crash tests.
    monkeypatch.setenv("KBSYNC_CONVERT_ISOLATION", "false")
    return Settings()


@pytest.fixture
def runtime(settings):
    from kbsync.app.runtime import Runtime

    rt = Runtime.open(settings)
    yield rt
    rt.close()
