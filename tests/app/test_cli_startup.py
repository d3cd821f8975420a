"""The CLI starts lazily: help and version load none of the heavy machinery, and a bad
``KBSYNC_*`` setting stops it in one line before anything is opened.

``kbsync search --help`` used to cost the import of the whole query side; Prefect
alone takes seconds to import. Each case runs ``main`` in a fresh interpreter and
lists what it imported, so an eager import anywhere under ``kbsync.app`` (or in
``kbsync/__init__.py``) fails here by name.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kbtest import hash_env, run_kbsync

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


KBSYNC = str(Path(sys.executable).with_name("kbsync"))


@pytest.mark.parametrize("variable, value", [
    ("KBSYNC_MAX_FILE_MB", "inf"), ("KBSYNC_MIN_FREE_MB", "inf"),
    ("KBSYNC_CONVERT_MEMORY_MB", "9" * 30), ("KBSYNC_CACHE_SIZE_GB", "1e308"),
    ("KBSYNC_COLLECTION", "k" * 300), ("KBSYNC_HOME", ""),
])
@pytest.mark.parametrize("json_mode", [False, True])
def test_a_bad_setting_stops_the_real_cli_in_one_line(tmp_path, variable, value, json_mode):
    """Issue 37: these ended in ``InternalError: OverflowError``, an ``OSError``, or (an empty
    home) a store made in the working folder. Now: exit 2, one line naming the variable,
    no traceback, nothing created; with ``--json`` the one error object on stdout."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("KBSYNC_")}
    env.update({"KBSYNC_EMBED_PROVIDER": "hash", variable: value})
    argv = [KBSYNC, "stats"] + (["--json"] if json_mode else [])
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith(f"kbsync: error: {variable}="), lines
    assert "Traceback" not in proc.stderr and "Overflow" not in proc.stderr
    if json_mode:
        error = json.loads(proc.stdout)["error"]
        assert error["kind"] == "UsageError" and error["message"].startswith(f"{variable}=")
    else:
        assert proc.stdout == ""
    assert list(tmp_path.iterdir()) == []  # no store, no cache made anywhere


def _closed_port() -> int:
    """A local TCP port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("json_mode", [False, True])
def test_an_unreachable_prefect_api_is_one_line_naming_it(tmp_path, json_mode):
    """A ``PREFECT_API_URL`` nobody answers at ended as ``InternalError: RuntimeError``; it is
    ``OrchestratorUnavailable``, one line naming the variable and its URL, nothing ingested."""
    share = tmp_path / "share"
    share.mkdir()
    (share / "a.md").write_text("# A\n\nsome text\n")
    url = f"http://127.0.0.1:{_closed_port()}/api"
    env = hash_env(url, tmp_path / "home")
    code, data, stderr = run_kbsync(env, "ingest", str(share), *(["--json"] if json_mode else []))
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 1, stderr
    assert "Traceback" not in stderr and "InternalError" not in stderr
    assert len(lines) == 1 and "OrchestratorUnavailable" in lines[0], lines
    assert f"PREFECT_API_URL={url}" in lines[0] and "unset PREFECT_API_URL" in lines[0]
    if json_mode:
        assert data is not None and data["error"]["kind"] == "OrchestratorUnavailable"
        assert data["files_seen"] == 0


def test_python_dash_m_kbsync_is_the_command(tmp_path):
    """``python -m kbsync`` runs the console script's ``main``: same help, same exit."""
    proc = subprocess.run([sys.executable, "-m", "kbsync", "--help"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: kbsync")
