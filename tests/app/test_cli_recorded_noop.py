"""A CLI ingest against a Prefect API with nothing to write is recorded over REST (issue 42).

The real ``kbsync`` command against the session's Prefect server: a no-op run imports no
Prefect and is still one flow run of ``ingest`` with the flow's name, parameters, version,
state, log lines, artifacts and event; a run with work hands over to the flow (subflows,
task runs) and leaves no second record; a refusal is the flow's Failed run; known
failures keep the flow's rule. The API is read with Prefect's own client.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import uuid

import httpx
import pytest
from prefect.artifacts import Artifact
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, LogFilter, LogFilterFlowRunId
from prefect.client.schemas.objects import StateType

from kbsync.ingest.report import artifact_key
from kbtest import hash_env, run_kbsync, write_tree

BROKEN = b"%PDF-1.7 this is not really a pdf"


def _runs(name: str) -> list:
    """The flow runs named ``ingest: NAME incremental``, oldest first."""
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            name={"any_": [f"ingest: {name} incremental"]}))
    return sorted(runs, key=lambda r: r.created)


def _children(run_id) -> list:
    with get_client(sync_client=True) as client:
        return client.read_flow_runs(flow_run_filter=FlowRunFilter(
            parent_flow_run_id={"any_": [run_id]}))


def _log_lines(run_id) -> list[tuple[int, str]]:
    with get_client(sync_client=True) as client:
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(
            any_=[uuid.UUID(str(run_id))])))
    return [(entry.level, entry.message) for entry in logs]


def _event(api: str, resource_id: str) -> dict:
    """The ``kbsync.sync.finished`` event of ``resource_id``, once the API has stored it
    (events are stored asynchronously: wait on the event itself, within a bound)."""
    deadline = time.monotonic() + 60
    body = {"filter": {"event": {"name": ["kbsync.sync.finished"]},
                       "resource": {"id": [resource_id]},
                       "occurred": {"since": "2000-01-01T00:00:00Z"}}, "limit": 5}
    while True:
        events = httpx.post(f"{api}/events/filter", json=body, timeout=30).json()["events"]
        if events:
            return events[0]
        assert time.monotonic() < deadline, f"no event for {resource_id}"
        time.sleep(0.3)


def _no_op_importing(env: dict, *args: str) -> tuple[int, dict, set[str]]:
    """``python -X importtime -m kbsync ARGS``: exit code, JSON summary, modules imported."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "kbsync", *args], env=env,
                          capture_output=True, text=True, timeout=600)
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()
                if line.startswith("import time:")}
    return proc.returncode, json.loads(proc.stdout), imported


def test_a_no_op_is_the_flows_record_without_prefect_and_a_change_is_the_flow(
        prefect_api, tmp_path):
    share, tag = tmp_path / "share", uuid.uuid4().hex[:8]
    name, ns = f"noop{tag}", f"ns{tag}"
    write_tree(share, {"a.md": "# A\n\nalpha words here", "b.md": "# B\n\nbeta words here"})
    env = hash_env(prefect_api, tmp_path / "home")
    root = f"{name}={share}"
    code, first, err = run_kbsync(env, "ingest", root, "--namespace", ns, "--json")
    assert code == 0, err
    [flow_run] = _runs(name)  # a first ingest: the flow at once
    assert _children(flow_run.id), "the first ingest ran its root as a subflow"

    code, noop, imported = _no_op_importing(env, "ingest", root, "--namespace", ns, "--json")
    assert code == 0 and noop["unchanged"] == 2 and noop["added"] == noop["updated"] == 0
    assert not {m for m in imported if m.split(".")[0] in {"prefect", "flows", "tasks"}}
    flow_run, recorded = _runs(name)
    assert str(recorded.id) == noop["run_id"]
    assert recorded.state.type is StateType.COMPLETED and recorded.state.name == "Completed"
    assert recorded.flow_id == flow_run.flow_id and recorded.flow_version == flow_run.flow_version
    assert recorded.parameters == flow_run.parameters
    assert recorded.start_time and recorded.end_time and recorded.end_time >= recorded.start_time
    assert not _children(recorded.id)
    lines = _log_lines(recorded.id)
    assert (20, f"ingest {ns}: added 0, updated 0, unchanged 2, deleted 0, failed 0") in lines
    assert any(message.startswith("embedding model: hash/") for _, message in lines)
    summary = Artifact.get(artifact_key("kbsync-ingest", ns))
    assert summary is not None and summary.flow_run_id == recorded.id
    assert f"# kbsync ingest: {ns} (ok)" in str(summary.data)
    table = Artifact.get(artifact_key("kbsync-ingest-failures", ns))
    assert table is not None and table.flow_run_id == recorded.id and "[]" in str(table.data)
    event = _event(prefect_api, f"kbsync.sync.{noop['run_id']}")
    assert event["payload"]["namespace"] == ns and event["payload"]["added"] == 0
    roles = {r["prefect.resource.role"]: r for r in event["related"]}
    assert roles["flow"]["prefect.resource.name"] == "ingest"
    assert roles["flow-run"]["prefect.resource.id"] == f"prefect.flow-run.{recorded.id}"

    (share / "b.md").write_text("# B\n\nbeta words changed", encoding="utf-8")
    code, changed, err = run_kbsync(env, "ingest", root, "--namespace", ns, "--json")
    assert code == 0 and changed["updated"] == 1, err
    runs = _runs(name)
    assert len(runs) == 3, "the hand-over left its probe's run behind"
    assert str(runs[-1].id) == changed["run_id"] and _children(runs[-1].id)
    assert all(r.state.type is StateType.COMPLETED for r in runs)


def test_known_failures_keep_the_flows_rule_and_a_refusal_is_the_flows_failed_run(
        prefect_api, tmp_path):
    share, tag = tmp_path / "share", uuid.uuid4().hex[:8]
    name, ns = f"bad{tag}", f"bad{tag}"
    write_tree(share, {"good.md": "# Good\n\nfine words"})
    (share / "broken.pdf").write_bytes(BROKEN)
    env = hash_env(prefect_api, tmp_path / "home")
    root = f"{name}={share}"
    code, first, _ = run_kbsync(env, "ingest", root, "--namespace", ns, "--json")
    assert code == 3 and first["failed"] == 1
    code, again, _ = run_kbsync(env, "ingest", root, "--namespace", ns, "--json")
    assert code == 3 and again["failed"] == 1 and again["added"] == again["updated"] == 0
    flow_run, recorded = _runs(name)
    assert flow_run.state.type is StateType.FAILED  # new failure, the flow's own run
    assert not _children(recorded.id)  # recorded over REST
    assert recorded.state.type is StateType.COMPLETED
    assert recorded.state.name == "Completed with known failures"
    assert any(level == 30 and "broken.pdf" in message and "it failed in the last run too" in message
               for level, message in _log_lines(recorded.id)), _log_lines(recorded.id)

    other = tmp_path / "other"
    write_tree(other, {"c.md": "# C\n\nother words"})
    code, refused, err = run_kbsync(env, "ingest", f"{name}={other}", "--namespace", ns,
                                    "--json")
    assert code != 0 and refused["error"]["kind"] == "RootConflict", err
    runs = _runs(name)
    assert len(runs) == 3 and runs[-1].state.type is StateType.FAILED
    assert "RootConflict" in str(Artifact.get(artifact_key("kbsync-ingest", ns)).description)


def _args(root: str, ns: str) -> argparse.Namespace:
    return argparse.Namespace(roots=[root], namespace=ns, mode="incremental", force=False,
                              dry_run=False, include=[], exclude=[], allow_mass_delete=False,
                              max_delete_fraction=0.5, rebind=False, json=True)


def test_an_interrupted_probe_ends_its_run_crashed_and_work_deletes_it(
        prefect_api, settings, tmp_path, monkeypatch):
    from kbsync.app import cli_plain, cli_recorded

    monkeypatch.setenv("PREFECT_API_URL", prefect_api)
    monkeypatch.setattr(cli_plain, "first_ingest", lambda settings: False)
    share, tag = tmp_path / "share", uuid.uuid4().hex[:8]
    write_tree(share, {"a.md": "# A\n\nwords"})

    def interrupted(*args):
        raise KeyboardInterrupt

    probe = cli_recorded._probe
    monkeypatch.setattr(cli_recorded, "_probe", interrupted)
    with pytest.raises(KeyboardInterrupt):
        cli_recorded.recorded_if_idle(_args(f"int{tag}={share}", "default"), settings)
    [run] = _runs(f"int{tag}")
    assert run.state.type is StateType.CRASHED and "KeyboardInterrupt" in run.state.message

    monkeypatch.setattr(cli_recorded, "_probe", probe)
    # A root with work (never ingested): the probe stops before writing, its run is gone,
    # and its runtime, store open, is the one the flow in this process will use.
    from tasks import resources

    assert cli_recorded.recorded_if_idle(_args(f"work{tag}={share}", "default"), settings) is None
    assert _runs(f"work{tag}") == []
    adopted = resources._runtimes.get(resources._key(settings))
    try:
        assert adopted is not None and resources.runtime_for(settings) is adopted
        assert adopted.store.count(settings.collection) == 0  # open: nothing written
    finally:
        resources.release(settings)


def _clean_prefect_env(monkeypatch, tmp_path):
    import os

    for key in list(os.environ):
        if key.startswith("PREFECT_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect"))


def test_only_a_self_hosted_api_it_fully_understands_is_spoken_to(monkeypatch, tmp_path):
    from kbsync.app.prefect_rest import PrefectRest, rest_settings

    _clean_prefect_env(monkeypatch, tmp_path)
    assert rest_settings() is None  # no API at all
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    assert rest_settings() == {"PREFECT_API_URL": "http://127.0.0.1:4200/api"}
    monkeypatch.setenv("PREFECT_API_AUTH_STRING", "admin:pass")
    api = PrefectRest(rest_settings())
    assert api.headers["Authorization"] == "Basic YWRtaW46cGFzcw=="  # base64 of admin:pass
    for key, value in (("PREFECT_API_KEY", "pnu_secret"),  # Prefect Cloud: the flow's client
                       ("PREFECT_API_TLS_INSECURE_SKIP_VERIFY", "true"),
                       ("PREFECT_CLIENT_CUSTOM_HEADERS", '{"X-Team": "a"}')):
        monkeypatch.setenv(key, value)
        assert rest_settings() is None, key
        monkeypatch.delenv(key)
    monkeypatch.setenv("PREFECT_API_DATABASE_CONNECTION_URL", "sqlite+aiosqlite:///x.db")
    assert rest_settings() is not None  # a server-side setting: not the client's business
    monkeypatch.setenv("PREFECT_API_URL", "https://api.prefect.cloud/api/accounts/a/workspaces/b")
    assert rest_settings() is None


def test_the_active_profile_is_read_and_the_environment_wins(monkeypatch, tmp_path):
    from kbsync.app.cli_ingest import prefect_api_configured
    from kbsync.app.prefect_rest import rest_settings

    _clean_prefect_env(monkeypatch, tmp_path)
    (tmp_path / "prefect").mkdir()
    (tmp_path / "prefect" / "profiles.toml").write_text(
        'active = "team"\n[profiles.team]\nPREFECT_API_URL = "http://10.0.0.5:4200/api"\n'
        'PREFECT_API_AUTH_STRING = "u:p"\n', encoding="utf-8")
    assert prefect_api_configured()
    assert rest_settings() == {"PREFECT_API_URL": "http://10.0.0.5:4200/api",
                               "PREFECT_API_AUTH_STRING": "u:p"}
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    assert rest_settings()["PREFECT_API_URL"] == "http://127.0.0.1:4200/api"
    monkeypatch.setenv("PREFECT_PROFILE", "ephemeral")  # a profile without an API
    monkeypatch.delenv("PREFECT_API_URL")
    assert not prefect_api_configured() and rest_settings() is None
