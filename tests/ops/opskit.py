"""Process and API plumbing for the deploy-and-run tests (test_deploy_e2e.py)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PREFECT = str(BIN / "prefect")


@dataclass
class Stack:
    api: str
    env: dict[str, str]          # for CLI clients
    worker_env: dict[str, str]   # what flow runs see (kbsync settings)
    tmp: Path
    http: httpx.Client

    def post(self, path: str, body: dict | None = None) -> Any:
        response = self.http.post(path, json=body or {})
        response.raise_for_status()
        return response.json()

    def get(self, path: str) -> Any:
        response = self.http.get(path)
        response.raise_for_status()
        return response.json()

    def deployments(self) -> dict[str, dict]:
        return {d["name"]: d for d in self.post("/deployments/filter")}

    def runs(self, body: dict) -> list[dict]:
        return self.post("/flow_runs/filter", body)

    def runs_of(self, deployment: str) -> list[dict]:
        dep_id = self.deployments()[deployment]["id"]
        return self.runs({"flow_runs": {"deployment_id": {"any_": [dep_id]}}})

    def state(self, run_id: str) -> str:
        return self.get(f"/flow_runs/{run_id}")["state_name"]

    def children(self, run_id: str) -> list[dict]:
        return self.runs({"flow_runs": {"parent_flow_run_id": {"any_": [run_id]}}})

    def cancel(self, run_id: str) -> None:
        """What the UI's Cancel button (and `prefect flow-run cancel`) asks of the API."""
        self.post(f"/flow_runs/{run_id}/set_state",
                  {"state": {"type": "CANCELLING", "name": "Cancelling"}})

    def artifacts(self, run_ids: list[str]) -> list[dict]:
        return self.post("/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": run_ids}}})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with log.open("wb") as out:  # the child keeps its own handle
        return subprocess.Popen(args, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
    """Signal ``proc``, wait, then end any descendant it left behind (all by pid)."""
    try:
        family = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    _, alive = psutil.wait_procs(family, timeout=5)
    for child in alive:
        child.terminate()
    _, alive = psutil.wait_procs(alive, timeout=5)
    for child in alive:
        child.kill()
    return proc.returncode


def tail(path: Path, lines: int = 40) -> str:
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def cli(stack: Stack, *args: str, timeout: float = 120, env: dict | None = None):
    return subprocess.run([PREFECT, *args], env=env or stack.env, cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)
