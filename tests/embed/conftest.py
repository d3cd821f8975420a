"""Fixtures for the embedding tests: a fake OpenAI server and a sleep recorder."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# ``tests.fake_openai`` is shared with other test areas; make the repo root
# importable even when pytest is started without ``pythonpath = ["."]``.
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.fake_openai import FakeOpenAIServer  # noqa: E402


class SleepRecorder:
    """Injected instead of time.sleep: records waits, never sleeps."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


@pytest.fixture
def sleeps() -> SleepRecorder:
    return SleepRecorder()


@pytest.fixture
def fake_server():
    """A started FakeOpenAIServer (dimension 8); faults set per test."""
    with FakeOpenAIServer(dimension=8) as server:
        yield server


@pytest.fixture(scope="session")
def onnx_cache(tmp_path_factory) -> Path:
    """One folder for ONNX exports per test session: each precision is exported once."""
    return tmp_path_factory.mktemp("onnx-models")
