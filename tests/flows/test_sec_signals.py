"""SIGTERM and SIGHUP end ``kbsync ingest --json`` as Ctrl-C does, and what the CLI
started ends with it (issue 22).

Before, SIGTERM (systemd, a CI timeout, a scheduler) killed the CLI outright: exit 143
with empty stdout and stderr, and the temporary Prefect server it had started (one
uvicorn of ~220 MB) ran on, orphaned, for good. Now the run unwinds as after Ctrl-C:
the JSON object with ``error`` (and counts that add up) on stdout, one line on stderr,
exit ``128 + signal``, and no process the CLI started outlives it. A CLI killed with
SIGKILL, which runs no exit hook, takes the temporary server with it too (the kernel's
parent-death signal).

Real parts: the real CLI, the temporary Prefect server it starts itself (no
PREFECT_API_URL), conversion worker processes, the embedded store.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from kbtest import cli_env, write_tree

KBSYNC = str(Path(sys.executable).with_name("kbsync"))
FILES = 1500  # one file per batch: minutes of work, so the run is mid-way when signalled

pytestmark = pytest.mark.slow


def _settings(tmp: Path) -> dict[str, str]:
    """No Prefect API (each run starts its own server, under ``tmp``), one file a batch."""
    return {"KBSYNC_EMBED_PROVIDER": "hash", "KBSYNC_FILES_PER_BATCH": "1",
            "PREFECT_HOME": str(tmp / "prefect")}


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _alive(processes: list[psutil.Process]) -> list[str]:
    alive = []
    for proc in processes:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(f"{proc.pid} {' '.join(proc.cmdline()[:4])}")
        except psutil.NoSuchProcess:
            pass
    return alive


def _kill_all(processes: list[psutil.Process]) -> None:
    for proc in processes:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass


def _wait_for(condition, timeout_s: float, what: str, proc: subprocess.Popen, errors: Path):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        assert proc.poll() is None, f"kbsync exited before {what}:\n{errors.read_text()[-2000:]}"
        time.sleep(0.2)
    raise AssertionError(f"no {what} within {timeout_s:.0f} s")


def _uvicorn(pid: int) -> list[psutil.Process]:
    found = []
    for child in _descendants(pid):
        try:
            if "uvicorn" in child.cmdline():
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_mid_run_prints_the_error_object_and_stops_what_it_started(tmp_path, signum,
                                                                            code):
    share = tmp_path / "share"
    write_tree(share, {f"d{i % 10}/doc{i:04d}.md": f"# Doc {i}\n\n" + f"Topic {i}. " * 40
                       for i in range(FILES)})
    env = cli_env(None, tmp_path / "home", drop=("KBSYNC_", "PREFECT_"), **_settings(tmp_path))
    errors = tmp_path / "stderr.txt"
    with errors.open("wb") as sink:
        proc = subprocess.Popen([KBSYNC, "ingest", str(share), "--json"], env=env,
                                stdout=subprocess.PIPE, stderr=sink, stdin=subprocess.DEVNULL)
    started: list[psutil.Process] = []
    try:
        # The run is under way once its chunk collection exists (made before the first batch),
        # with the temporary server the CLI started answering it.
        collection = tmp_path / "home" / "qdrant" / "kbsync" / "edge_config.json"
        _wait_for(lambda: collection.is_file() and _uvicorn(proc.pid), 240,
                  "chunk collection and temporary server", proc, errors)
        started = _descendants(proc.pid)
        assert _uvicorn(proc.pid)
        proc.send_signal(signum)
        out, _ = proc.communicate(timeout=60)
        # what saw its parent go (a conversion worker) may take a moment to exit on its own
        left = _alive(psutil.wait_procs(started, timeout=10)[1])
    finally:
        if proc.poll() is None:
            proc.kill()
        _kill_all(started + _descendants(proc.pid))
    name = signal.Signals(signum).name
    assert proc.returncode == code, errors.read_text()[-2000:]
    lines = [line for line in errors.read_text().splitlines() if line.strip()]
    assert lines == [f"kbsync: Interrupted: terminated by {name}"], lines
    result = json.loads(out)
    assert result["error"] == {"kind": "Interrupted", "message": f"terminated by {name}"}
    assert result["added"] + result["updated"] + result["unchanged"] + result["failed"] \
        + result["not_attempted"] == result["files_seen"], \
        {k: result[k] for k in ("files_seen", "added", "failed", "not_attempted")}
    # files the signal kept from being read were interrupted, not broken
    unfinished = [f for f in result["failures"] if f["message"].startswith("not processed")]
    assert all(f["error"] == "Interrupted" for f in unfinished), unfinished[:3]
    assert not left, f"still running after kbsync exited: {left}"


def test_a_killed_cli_takes_its_temporary_server_with_it(tmp_path):
    """SIGKILL runs no exit hook: the kernel ends the server (PR_SET_PDEATHSIG)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    script = ("import sys, time; sys.path.insert(0, sys.argv[1]); "
              "from tasks.temp_server import start; server = start(); "
              "print(server._process.pid, flush=True); time.sleep(600)")
    env = cli_env(None, tmp_path / "home", drop=("KBSYNC_", "PREFECT_"), **_settings(tmp_path),
              PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    parent = subprocess.Popen([sys.executable, "-c", script, env["PYTHONPATH"]], env=env,
                              stdout=subprocess.PIPE, text=True)
    server = None
    try:
        server = psutil.Process(int(parent.stdout.readline()))
        assert server.is_running()
        parent.kill()
        parent.wait(10)
        gone, alive = psutil.wait_procs([server], timeout=10)
        assert not alive, "the temporary server outlived the killed CLI"
    finally:
        if parent.poll() is None:
            parent.kill()
        if server is not None:
            _kill_all([server])
