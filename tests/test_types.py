"""kbsync/, tasks/, flows/ and deployments/ type-check clean under the project's mypy settings
([tool.mypy] in pyproject.toml).

CI runs only pytest, so the type check is a test. mypy reuses its cache in
``.mypy_cache`` (a warm run takes a few seconds, a cold one about a minute on 2 cores).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mypy import api

ROOT = Path(__file__).resolve().parents[1]


def test_kbsync_type_checks_clean(monkeypatch: pytest.MonkeyPatch) -> None:
    # The files and flags come from pyproject.toml; from the root, its relative paths resolve.
    monkeypatch.chdir(ROOT)
    stdout, stderr, status = api.run(["--config-file", str(ROOT / "pyproject.toml")])
    assert status == 0, f"mypy found problems (exit {status}):\n{stdout}{stderr}"
