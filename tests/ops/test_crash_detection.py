"""A flow run whose process is SIGKILLed ends Crashed: heartbeats + prefect.yaml's automation.

A worker (or serve.py) marks a run Crashed itself when only the run's process dies, so
the run here has no supervisor: an ingest started by a plain ``python`` process that is
killed with SIGKILL (what a host restart or the OOM killer does to worker and run
alike). Against a real ``prefect server start``, with prefect.yaml's automation
registered by ``deployments/automations.py``, only its window shortened (300 s -> 45 s)
and the heartbeat at Prefect's minimum (30 s), so the test waits a minute, not five.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
import yaml
from opskit import ROOT, Stack, server_stack, start, stop, tail, wait_for

pytestmark = pytest.mark.slow

HEARTBEAT_S = "30"    # Prefect's minimum (prefect.yaml: 60)
WITHIN_S = 45         # the test's window (prefect.yaml: 300); must exceed the heartbeat
#                       interval, or live runs are crashed between two heartbeats
# Proactive triggers are evaluated every 5 s; the action is then queued and applied.
BOUND_S = WITHIN_S + 25
AUTOMATION = "kbsync: crash runs without heartbeats"
INGEST = ("import sys; from flows.ingest import ingest; "
          "ingest(roots=[sys.argv[1]], namespace='zombie')")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A bare ``prefect server start`` (its triggers and actions services on)."""
    with server_stack(tmp_path_factory.mktemp("crash")) as stack:
        yield stack


def _register_automation(stack: Stack) -> dict:
    """prefect.yaml's automation with the test's window, registered twice (idempotent)."""
    data = yaml.safe_load((ROOT / "prefect.yaml").read_text(encoding="utf-8"))
    (automation,) = [a for a in data["automations"] if a["name"] == AUTOMATION]
    automation["trigger"]["within"] = WITHIN_S
    copy = stack.tmp / "automations.yaml"
    copy.write_text(yaml.safe_dump({"automations": [automation]}), encoding="utf-8")
    for _ in range(2):
        done = subprocess.run([sys.executable, str(ROOT / "deployments" / "automations.py"),
                               "--prefect-file", str(copy)], env=stack.env, cwd=ROOT,
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
    (registered,) = [a for a in stack.post("/automations/filter") if a["name"] == AUTOMATION]
    return registered


def _heartbeats(stack: Stack) -> set[str]:
    """Flow-run ids that sent at least one heartbeat."""
    events = stack.post("/events/filter", {"filter": {"event": {
        "name": ["prefect.flow-run.heartbeat"]}}, "limit": 50})["events"]
    return {e["resource"]["prefect.resource.id"].removeprefix("prefect.flow-run.")
            for e in events}


def _automation_events(stack: Stack) -> list[dict]:
    return stack.post("/events/filter", {"filter": {"event": {
        "prefix": ["prefect.automation."]}}, "limit": 50})["events"]


def _ingest(stack: Stack, share, home, log):
    env = {**stack.env, "KBSYNC_HOME": str(home), "KBSYNC_EMBED_PROVIDER": "hash",
           "KBSYNC_FILES_PER_BATCH": "1", "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": HEARTBEAT_S}
    return start([sys.executable, "-c", INGEST, str(share)], env, log)


def test_sigkilled_run_and_its_subflow_become_crashed(server, tmp_path):
    registered = _register_automation(server)
    assert registered["trigger"]["posture"] == "Proactive"
    assert registered["actions"] == [{"type": "change-flow-run-state", "state": "CRASHED",
                                      "name": None, "force": False,
                                      "message": registered["actions"][0]["message"]}]
    share = tmp_path / "share"
    share.mkdir()
    # One file per batch: minutes of work, killed after seconds (200 batches now take ~20 s).
    for i in range(3000):
        (share / f"d{i:03d}.md").write_text(f"# Doc {i}\n\n" + f"Topic {i}. " * 40)
    small = tmp_path / "small"
    small.mkdir()
    (small / "ok.md").write_text("# Ok\n\nA run that completes is left alone.\n")
    log = tmp_path / "run.log"
    # First a healthy run (own store) that completes: the automation must not touch it. It
    # runs before the long one, which floods the server with task runs: beside it, under
    # load, the healthy run's subflow waited minutes to be created.
    done = _ingest(server, small, tmp_path / "home-small", tmp_path / "small.log")
    proc = None
    try:
        try:
            code = done.wait(180)
        except subprocess.TimeoutExpired:
            code = None
        assert code == 0, tail(tmp_path / "small.log")
        healthy = {r["id"] for r in server.runs(  # the completed run and its subflow
            {"flow_runs": {"state": {"type": {"any_": ["COMPLETED"]}}}})}
        assert len(healthy) == 2
        completed = time.monotonic()
        proc = _ingest(server, share, tmp_path / "home", log)

        def running_with_heartbeats() -> tuple[str, str] | None:
            assert proc.poll() is None, f"the run ended early:\n{tail(log)}"
            runs = server.runs({"flow_runs": {"state": {"type": {"any_": ["RUNNING"]}}}})
            runs = [r for r in runs if r["id"] not in healthy]
            parents = [r["id"] for r in runs if not r["parent_task_run_id"]]
            children = [r["id"] for r in runs if r["parent_task_run_id"]]
            beating = _heartbeats(server)
            if parents and children and {parents[0], children[0]} <= beating:
                return parents[0], children[0]
            return None

        parent, child = wait_for(running_with_heartbeats, 120, "heartbeats of run and subflow")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        killed = time.monotonic()
        assert server.state(parent) == "Running"  # nobody reported anything

        def crashed() -> bool:
            return server.state(parent) == "Crashed" and server.state(child) == "Crashed"

        wait_for(crashed, BOUND_S, f"both runs to be Crashed within {BOUND_S} s")
        took = time.monotonic() - killed
        # The healthy runs' windows have passed too: no automation event names them.
        time.sleep(max(0.0, completed + WITHIN_S + 10 - time.monotonic()))
        # The state is changed before the action's events are persisted (the event
        # persister flushes in batches), so wait for them rather than read them once.
        def fired_for_parent() -> str | None:
            fired = str(_automation_events(server))
            return fired if parent in fired else None

        fired = wait_for(fired_for_parent, 30, "the automation's events to be stored")
        assert not any(r in fired for r in healthy)
        assert {server.state(r) for r in healthy} == {"Completed"}
    finally:
        if proc is not None:
            stop(proc, signal.SIGKILL, timeout=5)
        stop(done, signal.SIGKILL, timeout=5)
    run = server.get(f"/flow_runs/{parent}")
    assert "No heartbeat" in run["state"]["message"], run["state"]
    print(f"Crashed {took:.0f} s after SIGKILL (window {WITHIN_S} s)")
