"""The Prefect API dies mid-run: the run ends within KBSYNC_ORCHESTRATOR_TIMEOUT_S with one
OrchestratorUnavailable line, the store stays consistent, the next run converges (issue 10.6).

A real ``prefect server start`` in a subprocess is killed (SIGKILL, descendants too)
while ``kbsync ingest`` runs against it. Before the fix the CLI hung for 4-7 minutes.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from kbtest import write_tree

BIN = Path(sys.executable).parent
KBSYNC, PREFECT = str(BIN / "kbsync"), str(BIN / "prefect")
BOUND_S = 20  # KBSYNC_ORCHESTRATOR_TIMEOUT_S for this test (default 60)
# One file per batch: enough batches that the run is still writing when the API dies, which
# is once BATCHES_BEFORE_KILL of them have completed (the event, not a pause).
FILES = 2000
BATCHES_BEFORE_KILL = 20

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_server(port: int, prefect_home: Path, log: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "KBSYNC_"))}
    env.update(PREFECT_HOME=str(prefect_home), PREFECT_SERVER_ANALYTICS_ENABLED="false",
               PREFECT_SERVER_UI_ENABLED="false")
    with log.open("ab") as out:
        proc = subprocess.Popen([PREFECT, "server", "start", "--host", "127.0.0.1", "--port",
                                 str(port)], env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, log.read_text(errors="replace")[-2000:]
        time.sleep(1)
    _kill(proc)
    raise AssertionError("prefect server did not start in 150 s")


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc`` and every descendant, by pid."""
    try:
        family = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    for child in [psutil.Process(proc.pid)] + family if proc.poll() is None else family:
        try:
            child.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    proc.wait(10)
    psutil.wait_procs(family, timeout=10)


def _root_run_started(api: str) -> bool:
    body = {"flow_runs": {"name": {"like_": "ingest-root"},
                          "state": {"type": {"any_": ["RUNNING"]}}}}
    try:
        return bool(httpx.post(f"{api}/flow_runs/filter", json=body, timeout=5).json())
    except httpx.HTTPError:
        return False


def _batches_done(api: str) -> int:
    """How many ``batch`` task runs have completed (one file each here)."""
    body = {"task_runs": {"name": {"like_": "batch"},
                          "state": {"type": {"any_": ["COMPLETED"]}}}}
    try:
        return int(httpx.post(f"{api}/task_runs/count", json=body, timeout=5).json())
    except (httpx.HTTPError, ValueError):
        return 0


def _consistent_index(home: Path) -> dict[str, int]:
    """doc_id -> chunk_count, asserting every state record has exactly its points."""
    from kbsync.catalog.state import StateStore
    from kbsync.store.base import Filter
    from kbsync.store.edge.store import EdgeStore

    with EdgeStore(home / "qdrant") as store:
        states = StateStore(store, "kbsync_state").load("default")
        for doc_id, state in states.items():
            assert store.count("kbsync", Filter.where(namespace="default",
                                                      doc_id=doc_id)) == state.chunk_count
        assert store.count("kbsync") == sum(s.chunk_count for s in states.values())
    return {d: s.chunk_count for d, s in states.items()}


def test_lost_api_ends_the_run_within_the_bound_and_the_rerun_converges(tmp_path):
    port, prefect_home, log = _free_port(), tmp_path / "prefect", tmp_path / "server.log"
    api = f"http://127.0.0.1:{port}/api"
    share, home = tmp_path / "share", tmp_path / "home"
    write_tree(share, {f"d{i % 10}/note{i}.md": f"# Note {i}\n\n" + "retry timeout quota " * 40
                       + f"\n\n## Part two\n\nsection {i} tenant shard replica\n"
                       for i in range(FILES)})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "KBSYNC_"))}
    env.update(PREFECT_API_URL=api, PREFECT_HOME=str(prefect_home), KBSYNC_HOME=str(home),
               KBSYNC_EMBED_PROVIDER="hash", KBSYNC_CONVERT_ISOLATION="false",
               PREFECT_SERVER_ANALYTICS_ENABLED="false")
    server = _start_server(port, prefect_home, log)
    cli = None
    try:
        slow = {**env, "KBSYNC_FILES_PER_BATCH": "1", "KBSYNC_ORCHESTRATOR_TIMEOUT_S": str(BOUND_S)}
        cli = subprocess.Popen([KBSYNC, "ingest", str(share), "--json"], env=slow,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 90
        while not _root_run_started(api):
            assert cli.poll() is None, cli.communicate()
            assert time.monotonic() < deadline, "the ingest-root subflow never started"
            time.sleep(0.5)
        while _batches_done(api) < BATCHES_BEFORE_KILL:  # some written, most of the run ahead
            assert cli.poll() is None, cli.communicate()
            assert time.monotonic() < deadline, "no batch of the run completed"
            time.sleep(0.2)
        assert cli.poll() is None, "the run ended before the API was killed: make it longer"
        _kill(server)
        killed = time.monotonic()
        out, err = cli.communicate(timeout=BOUND_S + 30)
        elapsed = time.monotonic() - killed
    finally:
        if cli is not None and cli.poll() is None:
            cli.kill()
        _kill(server)

    assert elapsed <= BOUND_S + 5, f"the CLI took {elapsed:.0f} s after the API died"
    lines = [line for line in err.splitlines() if line.strip()]
    assert cli.returncode == 1 and len(lines) == 1, (cli.returncode, err[-3000:])
    assert lines[0].startswith("kbsync: OrchestratorUnavailable: ") and api in lines[0]
    assert json.loads(out)["error"]["kind"] == "OrchestratorUnavailable"
    before = _consistent_index(home)
    assert len(before) < FILES

    server = _start_server(port, prefect_home, log)  # the API is back: the next run converges
    try:
        proc = subprocess.run([KBSYNC, "ingest", str(share), "--json"], env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        summary = json.loads(proc.stdout)
        stats = json.loads(subprocess.run([KBSYNC, "stats", "--json"], env=env,
                                          capture_output=True, text=True, timeout=120).stdout)
    finally:
        _kill(server)
    assert summary["files_seen"] == FILES and summary["failed"] == 0
    assert summary["unchanged"] == len(before)
    after = _consistent_index(home)
    assert len(after) == FILES
    assert stats["namespaces"]["default"]["documents"] == FILES
    assert stats["namespaces"]["default"]["chunks"] == sum(after.values())
