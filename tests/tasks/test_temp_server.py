"""The temporary Prefect server ``kbsync ingest`` starts before Prefect's import.

The end-to-end case runs the real command without PREFECT_API_URL (so the early server
serves the run) in a fresh PREFECT_HOME, and checks that nothing of it outlives the run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from kbtest import write_tree
from tasks import temp_server

KBSYNC = str(Path(sys.executable).with_name("kbsync"))


def test_not_started_when_an_api_is_named(monkeypatch) -> None:
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    assert temp_server.start() is None


def _servers_of(prefect_home: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if "prefect.server.api.server:create_app" in " ".join(proc.info["cmdline"] or []) \
                    and proc.environ().get("PREFECT_HOME") == str(prefect_home):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


@pytest.mark.slow
def test_ingest_runs_on_the_early_server_and_stops_it(tmp_path: Path) -> None:
    share = tmp_path / "share"
    write_tree(share, {"a.md": "# Alpha\n\nFirst document.", "b.html": "<h1>Beta</h1><p>Second.</p>"})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KBSYNC_", "PREFECT_"))}
    env.update(KBSYNC_HOME=str(tmp_path / "home"), KBSYNC_EMBED_PROVIDER="hash",
               PREFECT_HOME=str(tmp_path / "prefect"), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    proc = subprocess.run([KBSYNC, "ingest", str(share), "--json"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)  # stdout holds the JSON object alone
    assert (summary["added"], summary["failed"]) == (2, 0)
    assert set(summary["stage_s"]) >= {"checks", "plan", "convert", "chunk", "embed", "write"}
    assert "Traceback" not in proc.stderr
    assert _servers_of(tmp_path / "prefect") == []
