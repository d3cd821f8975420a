"""The CLI starts lazily: help and version load none of the heavy machinery.

``kbsync search --help`` used to cost the import of the whole query side; Prefect
alone takes seconds to import. Each case runs ``main`` in a fresh interpreter and
lists what it imported, so an eager import anywhere under ``kbsync.app`` (or in
``kbsync/__init__.py``) fails here by name.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("prefect", "flows", "tasks", "qdrant_client", "qdrant_edge", "markitdown",
         "sentence_transformers", "torch", "openai", "kbsync.embed", "kbsync.store",
         "kbsync.query", "kbsync.ingest")
"""Top-level packages (and kbsync wings) that no help or version output needs."""

PROBE = """
import json, sys
from kbsync.app.cli import main
try:
    code = main(json.loads(sys.argv[1]))
except SystemExit as exc:  # argparse's --help and --version exit
    code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def _imports_of(argv: list[str]) -> tuple[int, str, set[str]]:
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(argv)], check=False,
                          capture_output=True, text=True, timeout=120)
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    return report["code"], proc.stdout, set(report["modules"])


@pytest.mark.parametrize("argv", [["search", "--help"], ["stats", "--help"], ["--version"],
                                  ["--help"], ["ingest", "--help"]])
def test_help_and_version_import_no_prefect_engine_model_or_converter(argv):
    code, out, modules = _imports_of(argv)
    assert code in (0, None) and out.strip()
    heavy = sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))
    assert heavy == [], f"kbsync {' '.join(argv)} imported {heavy}"
