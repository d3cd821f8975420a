"""prefect.yaml, serve.py and the CI example checked without a Prefect server (fast).

What needs a server (deploy, run, events) is in test_deploy_e2e.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PREFECT_FILE = ROOT / "prefect.yaml"
WORKFLOW = ROOT / "deployments" / "github-actions-reindex.yml"
HAS_EVALUATE = (ROOT / "flows" / "evaluate.py").exists()


def specs() -> dict[str, dict]:
    from deployments.serve import load_specs

    return {spec["name"]: spec for spec in load_specs(PREFECT_FILE)}


def ingest_schema() -> dict:
    from prefect.utilities.callables import parameter_schema

    from flows.ingest import ingest

    return parameter_schema(ingest).model_dump_for_openapi()


def test_prefect_deploy_reads_every_deployment():
    # `prefect deploy` skips a whole file that fails its model with only a yellow notice,
    # so read it the way the CLI does (private helper: an upgrade that changes it should
    # fail here, not silently in production).
    from prefect.cli.deploy._config import _load_deploy_configs_and_actions
    from rich.console import Console

    configs, actions = _load_deploy_configs_and_actions(PREFECT_FILE, console=Console())
    assert [c["name"] for c in configs] == ["nightly-sync", "backfill", "ci-reindex", "evaluate",
                                            "rebuild", "rollback", "restore"]
    # No pull step: `prefect deploy` records the directory it ran in (see prefect.yaml).
    assert actions["pull"] is None
    for config in configs:
        assert config["work_pool"]["name"] == "kbsync"
        assert config["enforce_parameter_schema"] is True


def test_nightly_sync_is_a_0200_guarded_full_sync_one_at_a_time():
    nightly = specs()["nightly-sync"]
    assert nightly["entrypoint"] == "flows/ingest.py:ingest"
    assert nightly["schedules"] == [{"cron": "0 2 * * *", "timezone": "UTC", "active": True}]
    assert nightly["concurrency_limit"] == {"limit": 1, "collision_strategy": "ENQUEUE"}
    # The nightly mirrors the share (deletions included) under the mass-delete guard.
    assert nightly["parameters"]["mode"] == "full"
    assert nightly["parameters"]["allow_mass_delete"] is False
    assert nightly["parameters"]["max_delete_fraction"] == 0.5
    assert "deleted" in nightly["description"] and "guard" in nightly["description"]
    assert nightly["parameters"]["roots"]


def test_backfill_has_no_schedule_and_no_defaults():
    backfill = specs()["backfill"]
    assert "schedules" not in backfill and "triggers" not in backfill
    assert not backfill.get("parameters")


def test_ci_reindex_trigger_takes_roots_from_the_event():
    from prefect.events import DeploymentEventTrigger

    (trigger,) = specs()["ci-reindex"]["triggers"]
    parsed = DeploymentEventTrigger.model_validate(trigger)
    assert parsed.expect == {"kbsync.reindex.requested"}
    assert parsed.parameters["roots"] == "{{ event.payload.roots }}"


def test_evaluate_trigger_fires_after_each_nightly_ingest_that_did_its_work():
    from prefect.events import DeploymentEventTrigger

    spec = specs()["evaluate"]
    assert spec["entrypoint"] == "flows/evaluate.py:evaluate"
    (trigger,) = spec["triggers"]
    parsed = DeploymentEventTrigger.model_validate(trigger)
    assert parsed.expect == {"kbsync.sync.finished"}  # tasks.events.SYNC_FINISHED
    assert spec["parameters"]["modes"] == ["hybrid"]  # the mode `kbsync search` uses
    assert [r.model_dump() for r in parsed.match_related] == [
        {"prefect.resource.role": "flow", "prefect.resource.name": "ingest"},
        {"prefect.resource.role": "deployment", "prefect.resource.name": "nightly-sync"}]


def test_no_secret_values_in_the_deployment_files():
    for path in (PREFECT_FILE, WORKFLOW):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"sk-[A-Za-z0-9]{8,}|pnu_[A-Za-z0-9]{8,}", text), path
        data = yaml.safe_load(text)
        for key, value in _walk(data):
            if re.search(r"(api_?key|token|secret|password|auth)", str(key), re.I):
                # Only references to the runner's secret store, never literal values.
                assert str(value).startswith("${{ secrets."), (path, key, value)


def _walk(node, key=""):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk(v, k)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item, key)
    else:
        yield key, node


def test_ingest_parameters_render_a_typed_form():
    schema = ingest_schema()
    props = schema["properties"]
    assert list(props) == ["roots", "namespace", "mode", "force", "dry_run", "include",
                           "exclude", "allow_mass_delete", "max_delete_fraction", "rebind"]
    assert schema["required"] == ["roots"]
    for name, prop in props.items():
        assert prop.get("description") and "\n" not in prop["description"], name
    assert props["mode"]["$ref"] == "#/definitions/SyncMode"
    assert schema["definitions"]["SyncMode"]["enum"] == ["incremental", "full"]
    assert props["roots"] == {**props["roots"], "type": "array", "minItems": 1,
                              "items": {"type": "string"}}
    assert props["include"]["items"] == {"type": "string"}
    assert (props["max_delete_fraction"]["minimum"], props["max_delete_fraction"]["maximum"]) \
        == (0, 1)


@pytest.mark.parametrize(("parameters", "problem"), [
    ({}, "'roots' is a required property"),
    ({"roots": []}, "should be non-empty"),
    ({"roots": ["/x"], "mode": "bogus"}, "'bogus' is not one of ['incremental', 'full']"),
    ({"roots": ["/x"], "max_delete_fraction": 2}, "2 is greater than the maximum of 1"),
    ({"roots": ["/x"], "force": "yes"}, "'yes' is not of type 'boolean'"),
    ({"roots": "/x"}, "'/x' is not of type 'array'"),
])
def test_the_api_validator_refuses_bad_parameters(parameters, problem):
    # The same validator the server runs before it creates a flow run
    # (enforce_parameter_schema); the e2e test checks the API answer itself.
    from prefect.utilities.schema_tools import ValidationError, validate

    with pytest.raises(ValidationError, match=re.escape(problem)):
        validate(parameters, ingest_schema(), raise_on_error=True, ignore_required=False)


def test_deployment_defaults_are_valid_parameters():
    from prefect.utilities.schema_tools import validate

    schema = ingest_schema()
    for name, spec in specs().items():
        if spec["entrypoint"] == "flows/ingest.py:ingest":
            params = {"roots": ["/x"], **(spec.get("parameters") or {})}
            validate(params, schema, raise_on_error=True, ignore_required=False)


def test_serve_builds_the_same_deployments(monkeypatch):
    from deployments.serve import select, to_runner_deployment

    monkeypatch.chdir(ROOT)
    names = ["nightly-sync", "backfill", "ci-reindex"] + (["evaluate"] if HAS_EVALUATE else [])
    built = {d.name: d for d in map(to_runner_deployment, select(list(specs().values()), names))}
    nightly = built["nightly-sync"]
    assert nightly.entrypoint == "flows/ingest.py:ingest"
    assert nightly.work_pool_name is None
    (schedule,) = nightly.schedules
    assert (schedule.schedule.cron, schedule.schedule.timezone, schedule.active) \
        == ("0 2 * * *", "UTC", True)
    assert nightly.concurrency_limit == 1
    assert nightly.concurrency_options.collision_strategy == "ENQUEUE"
    assert nightly.parameters["mode"] == "full"  # the nightly mirrors the share
    assert nightly.enforce_parameter_schema is True
    assert built["backfill"].schedules == [] and built["backfill"].triggers == []
    (trigger,) = built["ci-reindex"].triggers
    assert trigger.expect == {"kbsync.reindex.requested"}
    assert trigger.name == "ci-reindex on kbsync.reindex.requested"
    assert built["ci-reindex"]._parameter_openapi_schema.model_dump_for_openapi() \
        == ingest_schema()


def test_rebuild_is_an_on_demand_deployment_one_at_a_time():
    from prefect.utilities.callables import parameter_schema
    from prefect.utilities.schema_tools import validate

    from flows.rebuild import rebuild

    spec = specs()["rebuild"]
    assert spec["entrypoint"] == "flows/rebuild.py:rebuild"
    assert not spec.get("schedules") and not spec.get("triggers")
    assert spec["concurrency_limit"] == {"limit": 1, "collision_strategy": "ENQUEUE"}
    schema = parameter_schema(rebuild).model_dump_for_openapi()
    assert schema["required"] == ["queries_file"]
    assert set(schema["properties"]) == {"queries_file", "namespace", "max_drop", "modes", "k",
                                         "build"}
    validate(spec["parameters"], schema, raise_on_error=True, ignore_required=False)
    assert (ROOT / spec["parameters"]["queries_file"]).is_file()
    assert "build" in spec["description"] and "rollback" in spec["description"]
    # The build parameter is typed: the form shows a sub-field per setting, with an example.
    build = schema["definitions"]["BuildSettings"]
    assert {"chunk_tokens", "embed_model", "contextual_text"} <= set(build["properties"])
    assert all(field.get("description") for field in build["properties"].values())
    assert build.get("examples")
    assert build["additionalProperties"] is False
    validate({"queries_file": "q.jsonl", "build": {"chunk_tokens": 200}}, schema,
             raise_on_error=True, ignore_required=False)
    with pytest.raises(Exception, match="chunk_tokens"):
        validate({"queries_file": "q.jsonl", "build": {"chunk_tokens": "many"}}, schema,
                 raise_on_error=True, ignore_required=False)


@pytest.mark.parametrize("name", ["rollback", "restore"])
def test_rollback_and_restore_deployments_ask_for_confirmation(name):
    from prefect.utilities.callables import parameter_schema
    from prefect.utilities.schema_tools import validate

    import flows.rollback

    spec = specs()[name]
    assert spec["entrypoint"] == f"flows/rollback.py:{name}"
    assert not spec.get("schedules") and not spec.get("triggers")
    assert spec["parameters"] == {"confirm": False}  # a click alone changes nothing
    schema = parameter_schema(getattr(flows.rollback, name)).model_dump_for_openapi()
    assert schema["properties"]["confirm"]["type"] == "boolean"
    assert "Must be true" in schema["properties"]["confirm"]["description"]
    validate({**spec["parameters"], **({"name": "kbsync__r1"} if name == "restore" else {})},
             schema, raise_on_error=True, ignore_required=False)
    assert "confirm" in spec["description"] and "kbsync rebuild --" in spec["description"]


def test_serve_refuses_unknown_names_and_conflicting_envs():
    from deployments.serve import select, shared_env

    all_specs = list(specs().values())
    with pytest.raises(ValueError, match="unknown deployment"):
        select(all_specs, ["nightly"])
    assert shared_env(all_specs) == {"KBSYNC_LOCK_TIMEOUT_S": "1800",
                                     "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "60"}
    clash = [{"work_pool": {"job_variables": {"env": {"A": "1"}}}},
             {"work_pool": {"job_variables": {"env": {"A": "2"}}}}]
    with pytest.raises(ValueError, match="disagree on A"):
        shared_env(clash)


def test_every_run_heartbeats_and_the_crash_automation_outlasts_missed_ones():
    """The zombie-run detection (tests/ops/test_crash_detection.py runs it for real)."""
    from prefect.client.schemas.objects import StateType
    from prefect.events.schemas.automations import Posture

    from deployments.automations import load_automations

    frequencies = {name: spec["work_pool"]["job_variables"]["env"].get(
        "PREFECT_FLOWS_HEARTBEAT_FREQUENCY") for name, spec in specs().items()}
    assert set(frequencies.values()) == {"60"}, frequencies  # every deployment, one value
    (crash,) = load_automations(PREFECT_FILE)
    trigger = crash.trigger
    assert trigger.posture == Posture.Proactive and trigger.threshold == 1
    assert trigger.after == {"prefect.flow-run.heartbeat"}
    assert trigger.expect == {"prefect.flow-run.*"}  # the next heartbeat or any state change
    assert trigger.for_each == {"prefect.resource.id"}  # one window per flow run
    # A busy run may miss heartbeats; five may go missing before it is called Crashed.
    assert trigger.within.total_seconds() >= 5 * 60
    # Only kbsync's flows (the per-root subflow too): other flows keep their own rules.
    assert trigger.match_related.model_dump() == {
        "prefect.resource.role": "flow",
        "prefect.resource.name": ["ingest", "ingest-root", "evaluate", "rebuild"]}
    (action,) = crash.actions
    assert (action.type, action.state, action.force) == (
        "change-flow-run-state", StateType.CRASHED, False)  # never overrides a final state


def test_github_workflow_runs_ci_reindex_and_waits():
    workflow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    steps = workflow["jobs"]["reindex"]["steps"]
    (step,) = [s for s in steps if s.get("id") == "reindex"]
    assert "prefect deployment run 'ingest/ci-reindex'" in step["run"]
    assert "--watch" in step["run"]
    assert workflow["jobs"]["reindex"]["env"]["PREFECT_API_URL"] == "${{ secrets.PREFECT_API_URL }}"


def test_pool_template_references_secret_blocks_only():
    from deployments.pool_template import pool_template, secret_env

    env = secret_env(["KBSYNC_EMBED_API_KEY=kbsync-embed-api-key"])
    assert env == {"KBSYNC_EMBED_API_KEY": "{{ prefect.blocks.secret.kbsync-embed-api-key }}"}
    assert pool_template(env)["variables"]["properties"]["env"]["default"] == env
    for bad in ("KBSYNC_EMBED_API_KEY", "kbsync_key=block", "KEY=Not_A_Block", "KEY=sk-abc def"):
        with pytest.raises(ValueError, match="expected VAR=BLOCK"):
            secret_env([bad])
