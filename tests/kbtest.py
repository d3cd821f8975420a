"""Helpers shared by the test modules (import as ``from kbtest import ...``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample"


def write_tree(root: Path, files: dict[str, str]) -> None:
    """Create text files under root (parents made as needed)."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


KBSYNC = str(Path(sys.executable).with_name("kbsync"))


def cli_env(prefect_api: str, home: Path, **extra: str) -> dict[str, str]:
    """The environment of a ``kbsync`` subprocess: this one's, without KBSYNC_* settings,
    pointed at ``prefect_api`` and a store under ``home``; ``extra`` adds settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KBSYNC_")}
    env.update(PREFECT_API_URL=prefect_api, KBSYNC_HOME=str(home), HF_HUB_OFFLINE="1",
               PREFECT_SERVER_ANALYTICS_ENABLED="false", **extra)
    return env


def run_kbsync(env: dict[str, str], *args: str) -> tuple[int, dict | None, str]:
    """Run the real ``kbsync`` command: exit code, its JSON object (with ``--json``), stderr."""
    proc = subprocess.run([KBSYNC, *args], env=env, capture_output=True, text=True, timeout=600)
    data = json.loads(proc.stdout) if "--json" in args and proc.stdout.strip() else None
    return proc.returncode, data, proc.stderr
