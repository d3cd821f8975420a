"""SIGTERM and SIGHUP end ``kbsync ingest --json`` as Ctrl-C does, and what the CLI
started ends with it (issue 22).

Before, SIGTERM (systemd, a CI timeout, a scheduler) killed the CLI outright: exit 143
with empty stdout and stderr, and what it had started ran on, orphaned. Now the run
unwinds as after Ctrl-C: the JSON object with ``error`` (and counts that add up) on
stdout, one line on stderr, exit ``128 + signal``, and no process the CLI started outlives
it. (Issue 42: a CLI run without PREFECT_API_URL runs in process, so it no longer starts
Prefect's temporary server; none is started here.)

Real parts: the real CLI without PREFECT_API_URL (the runner in process), conversion
worker processes, the embedded store.
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
    """No Prefect API (the runner in process; a Prefect home under ``tmp`` all the same, so
    nothing would touch the user's), one file a batch."""
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
        # The run is under way once its chunk collection exists (made before the first batch)
        # and its conversion workers run.
        collection = tmp_path / "home" / "qdrant" / "kbsync" / "edge_config.json"
        _wait_for(lambda: collection.is_file() and _descendants(proc.pid), 240,
                  "chunk collection and conversion workers", proc, errors)
        started = _descendants(proc.pid)
        assert not _uvicorn(proc.pid), "no Prefect server without PREFECT_API_URL"
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
