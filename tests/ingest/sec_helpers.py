"""Helpers of the tests/ingest/test_sec_*.py files: a real ingest in a subprocess, run
as root without DAC override where a permission must hold (root would bypass it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kbsync.store.base import Filter

NO_DAC = ["capsh", "--drop=cap_dac_override,cap_dac_read_search", "--"]

needs_capsh = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("capsh") is None,
    reason="needs root and capsh to run without DAC override (as a plain user would)")

_PLAIN_INGEST = """
import json, sys
from kbsync.runtime import Runtime
from kbsync.ingest.discover import parse_root
from kbsync.ingest.runner import run_plain
from kbsync.models import SyncMode
from kbsync.settings import Settings

mode, roots = sys.argv[1], sys.argv[2:]
runtime = Runtime.open(Settings())
try:
    summary = run_plain([parse_root(r) for r in roots], runtime=runtime, mode=SyncMode(mode))
finally:
    runtime.close()
print(json.dumps(summary.to_dict()))
"""


def plain_ingest(*roots: Path, mode: str = "incremental", drop_dac: bool = False) -> dict:
    """``run_plain`` (the stages of ``kbsync ingest``) in a fresh process under this
    process's ``KBSYNC_*`` environment; its summary. ``drop_dac``: as root without
    CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH, so file permissions apply to it."""
    argv = [sys.executable, "-c", _PLAIN_INGEST, mode, *map(str, roots)]
    if drop_dac:
        argv = without_dac(argv)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def without_dac(argv: list[str]) -> list[str]:
    """``argv`` run through capsh as root without DAC override (file permissions apply)."""
    return [*NO_DAC, "-c", " ".join(_quote(a) for a in argv)]


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


def indexed(settings) -> dict[str, str]:
    """doc_id -> text of every chunk point in the store (the store closed again)."""
    from kbsync.runtime import Runtime

    runtime = Runtime.open(settings, with_embedder=False)
    try:
        found: dict[str, str] = {}
        for point in runtime.store.scroll(runtime.collection, Filter.where(namespace="default")):
            doc_id = point.payload["doc_id"]
            found[doc_id] = found.get(doc_id, "") + point.payload.get("text", "")
        return found
    finally:
        runtime.close()
