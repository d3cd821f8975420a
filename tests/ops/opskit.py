"""Process and API plumbing for the tests that run a real Prefect server (tests/ops)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PREFECT = str(BIN / "prefect")
POOL = "kbsync"  # prefect.yaml's work pool


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

    def story(self, run_id: str) -> str:
        """What an operator would read of a run and its subflows: WARNING and ERROR log
        lines, and the artifacts (for an assertion's message)."""
        ids = [run_id] + [c["id"] for c in self.children(run_id)]
        logs = self.post("/logs/filter", {"logs": {"flow_run_id": {"any_": ids},
                                                   "level": {"ge_": 30}}, "limit": 50})
        lines = [f"{entry['level']} {entry['message']}" for entry in logs]
        lines += [f"artifact {a['key']}:\n{a['data']}" for a in self.artifacts(ids)]
        return "\n".join(lines)


def make_share(path: Path, files: dict[str, bytes | str]) -> Path:
    """A folder holding ``files`` (name -> text or bytes), made fresh."""
    path.mkdir(parents=True)
    for name, content in files.items():
        data = content.encode() if isinstance(content, str) else content
        (path / name).write_bytes(data)
    return path


def run_id_of(output: str) -> str:
    """The flow-run id that `prefect deployment run` printed."""
    match = re.search(r"UUID: ([0-9a-f-]{36})", output)
    assert match, output
    return match.group(1)


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


@contextmanager
def server_stack(tmp: Path, *, ui: bool = False, server_env: dict[str, str] | None = None,
                 worker_env: dict[str, str] | None = None) -> Iterator[Stack]:
    """A bare ``prefect server start`` on 127.0.0.1, healthy, stopped on exit.

    ``server_env`` is added to the server's environment only (services to turn off);
    ``worker_env`` to what flow runs see, on top of a private ``KBSYNC_HOME`` and the
    ``hash`` embedder. With ``ui`` the server also serves the Prefect UI at the API's
    origin (``Stack.api`` without ``/api``).
    """
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "KBSYNC_"))}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", PREFECT_HOME=str(tmp / "prefect"),
               PREFECT_API_URL=api, PREFECT_SERVER_ANALYTICS_ENABLED="false",
               PREFECT_SERVER_UI_ENABLED=str(ui).lower(), PREFECT_CLI_PROMPT="false",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    flow_env = {**env, "KBSYNC_HOME": str(tmp / "kbsync-home"), "KBSYNC_EMBED_PROVIDER": "hash",
                "PREFECT_WORKER_QUERY_SECONDS": "1", **(worker_env or {})}
    server_log = tmp / "server.log"
    proc = start([PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port),
                  "--no-scheduler", "--analytics-off", *([] if ui else ["--no-ui"])],
                 {**env, **(server_env or {})}, server_log)
    http = httpx.Client(base_url=api, timeout=30)
    try:
        def healthy() -> bool:
            assert proc.poll() is None, f"server exited:\n{tail(server_log)}"
            try:
                return http.get("/health").status_code == 200
            except httpx.TransportError:
                return False

        wait_for(healthy, 150, "the Prefect server")
        yield Stack(api=api, env=env, worker_env=flow_env, tmp=tmp, http=http)
    finally:
        stop(proc)
        http.close()


def create_pool(stack: Stack) -> None:
    """prefect.yaml's work pool (process type)."""
    made = cli(stack, "work-pool", "create", POOL, "--type", "process")
    assert made.returncode == 0, made.stdout + made.stderr


def deploy(stack: Stack, deploy_args: list[str]) -> None:
    """``prefect deploy DEPLOY_ARGS`` from prefect.yaml."""
    deployed = cli(stack, "deploy", *deploy_args, timeout=240)
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr


@contextmanager
def redeployed_after(stack: Stack, deploy_args: list[str]) -> Iterator[None]:
    """Around a test that lets ``serve.py`` re-register (and, when it stops, pause) the
    module's deployments: afterwards they are deployed from prefect.yaml again and resumed,
    so the module's other tests find them as the fixture made them, in any order."""
    try:
        yield
    finally:
        deploy(stack, deploy_args)
        for deployment in stack.deployments().values():
            if deployment["paused"]:
                stack.post(f"/deployments/{deployment['id']}/resume_deployment")


@contextmanager
def deployed_stack(tmp: Path, deploy_args: list[str], *, ui: bool = False) -> Iterator[Stack]:
    """Server + work pool + ``prefect deploy DEPLOY_ARGS`` from prefect.yaml + a process worker.

    The worker serves the ``default`` queue only. Every process is stopped on exit, its
    descendants included, by pid; everything listens on 127.0.0.1.
    """
    quiet = {f"PREFECT_SERVER_SERVICES_{name}_ENABLED": "false"
             for name in ("LATE_RUNS", "FOREMAN", "PAUSE_EXPIRATIONS")}
    with server_stack(tmp, ui=ui, server_env=quiet) as stack:
        create_pool(stack)
        # The worker starts while `prefect deploy` runs. It serves the `default` queue only, so
        # evaluate runs (queue `evaluate`) wait to be inspected instead of being executed here.
        worker_log = tmp / "worker.log"
        worker = start([PREFECT, "worker", "start", "--pool", POOL, "--type", "process",
                        "--work-queue", "default"], stack.worker_env, worker_log)
        try:
            deploy(stack, deploy_args)

            def worker_online() -> bool:
                assert worker.poll() is None, f"worker exited:\n{tail(worker_log)}"
                workers = stack.post(f"/work_pools/{POOL}/workers/filter")
                return any(w["status"] == "ONLINE" for w in workers)

            wait_for(worker_online, 60, "the worker")
            yield stack
        finally:
            stop(worker)
