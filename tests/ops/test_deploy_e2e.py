"""Deploy-and-run against a real ``prefect server start``: prefect.yaml, a process worker, the CLI.

One server, one work pool and one worker serve the whole module (the server alone
takes ~25 s to start on 2 cores). Every subprocess has a timeout and is stopped in
teardown, its descendants included, by pid. Everything listens on 127.0.0.1.
The serve.py test re-registers the deployments without a pool and pauses them; it deploys
them again when it ends (``redeployed_after``), so the tests run in any order.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from opskit import (POOL, ROOT, cli, deployed_stack, redeployed_after, start, stop, tail,
                    wait_for)
from opskit import make_share as _share
from opskit import run_id_of as _run_id

KBSYNC = str(Path(sys.executable).with_name("kbsync"))
HAS_EVALUATE = (ROOT / "flows" / "evaluate.py").exists()
INGEST_DEPLOYMENTS = ["nightly-sync", "backfill", "ci-reindex"]

pytestmark = pytest.mark.slow


def _metrics(markdown: str) -> dict[str, str]:
    return dict(re.findall(r"^\| (\w+) \| ([^|]+?) \|$", markdown, re.M))


# The documented command when every entrypoint exists; per name while evaluate is missing.
DEPLOY_ARGS = ["--all"] if HAS_EVALUATE else [a for n in INGEST_DEPLOYMENTS for a in ("-n", n)]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """Server + work pool + deployments from prefect.yaml + a process worker."""
    with deployed_stack(tmp_path_factory.mktemp("ops"), DEPLOY_ARGS) as stack:
        yield stack


def test_deploy_registers_prefect_yaml(stack):
    deps = stack.deployments()
    assert set(INGEST_DEPLOYMENTS) <= set(deps)
    nightly, backfill, ci = deps["nightly-sync"], deps["backfill"], deps["ci-reindex"]
    assert [(s["schedule"]["cron"], s["schedule"]["timezone"], s["active"])
            for s in nightly["schedules"]] == [("0 2 * * *", "UTC", True)]
    assert nightly["global_concurrency_limit"]["limit"] == 1
    assert nightly["concurrency_options"]["collision_strategy"] == "ENQUEUE"
    assert nightly["parameters"]["mode"] == "full"  # the nightly mirrors the share
    assert backfill["schedules"] == [] and backfill["parameters"] == {}
    for dep in (nightly, backfill, ci):
        assert dep["work_pool_name"] == POOL and dep["enforce_parameter_schema"] is True
        # No pull step in prefect.yaml: `prefect deploy` recorded the directory it ran in.
        assert dep["pull_steps"] == [
            {"prefect.deployments.steps.set_working_directory": {"directory": str(ROOT)}}]
        schema = dep["parameter_openapi_schema"]
        assert schema["definitions"]["SyncMode"]["enum"] == ["incremental", "full"]
        assert all(p.get("description") for p in schema["properties"].values())
    automations = {a["name"]: a for a in stack.post("/automations/filter")}
    reindex = automations["ci-reindex on kbsync.reindex.requested"]
    assert reindex["trigger"]["expect"] == ["kbsync.reindex.requested"]
    assert reindex["actions"][0]["deployment_id"] == ci["id"]
    if HAS_EVALUATE:
        evaluate = automations["evaluate after each nightly-sync"]
        assert evaluate["actions"][0]["deployment_id"] == deps["evaluate"]["id"]


def test_ci_workflow_step_exits_0_and_writes_the_summary(stack):
    """The GitHub Actions example's own script, run against this server."""
    share = _share(stack.tmp / "docs-ok", {"guide.md": "# Guide\n\nRotate keys monthly.\n",
                                            "notes.txt": "plain notes\n"})
    workflow = yaml.safe_load((ROOT / "deployments" / "github-actions-reindex.yml").read_text())
    (step,) = [s for s in workflow["jobs"]["reindex"]["steps"] if s.get("id") == "reindex"]
    env = {**stack.env, "KBSYNC_DOCS_ROOT": str(share), "KBSYNC_NAMESPACE": "ci-ok"}
    done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Flow run finished successfully in 'Completed'" in done.stdout
    run_id = _run_id(done.stdout)
    run = stack.get(f"/flow_runs/{run_id}")
    assert run["parameters"] == {"roots": [f"docs={share}"], "namespace": "ci-ok"}
    summary = {a["key"]: a for a in stack.artifacts([run_id])}["kbsync-ingest-ci-ok"]
    metrics = _metrics(summary["data"])
    assert (metrics["files_seen"], metrics["added"], metrics["failed"]) == ("2", "2", "0")
    # The per-root subflow's progress artifact reached 100 %.
    (child,) = stack.children(run_id)
    progress = [a for a in stack.artifacts([child["id"]]) if a["type"] == "progress"]
    assert progress and float(progress[0]["data"]) == 100.0


def test_failed_file_makes_the_watch_exit_1_with_a_failure_table(stack):
    share = _share(stack.tmp / "docs-bad", {"good.md": "# Good\n\nFine text.\n",
                                             "broken.docx": os.urandom(512)})
    done = cli(stack, "deployment", "run", "ingest/ci-reindex", "--param",
               f"roots={json.dumps([str(share)])}", "--param", "namespace=ci-bad",
               "--watch", "--watch-timeout", "180", timeout=240)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Flow run finished in state 'Failed'" in done.stdout
    run_id = _run_id(done.stdout)
    assert stack.state(run_id) == "Failed"
    artifacts = {a["key"]: a for a in stack.artifacts([run_id])}
    assert _metrics(artifacts["kbsync-ingest-ci-bad"]["data"])["failed"] == "1"
    rows = json.loads(artifacts["kbsync-ingest-failures-ci-bad"]["data"])
    assert [(r["path"], r["doc_id"], r["error"]) for r in rows] == [
        (str(share / "broken.docx"), "docs-bad/broken.docx", "CorruptDocument")]
    assert rows[0]["message"]


def test_invalid_parameters_are_refused_before_a_run_exists(stack):
    before = len(stack.runs_of("backfill"))
    done = cli(stack, "deployment", "run", "ingest/backfill", "--param", 'roots=["/data"]',
               "--param", "mode=bogus")
    assert done.returncode == 1
    assert "'bogus' is not one of ['incremental', 'full']" in " ".join(done.stdout.split())
    dep_id = stack.deployments()["backfill"]["id"]
    for bad in ({}, {"roots": []}, {"roots": ["/data"], "max_delete_fraction": 2},
                {"roots": ["/data"], "dry_run": "maybe"}):
        answer = stack.http.post(f"/deployments/{dep_id}/create_flow_run",
                                 json={"parameters": bad})
        assert answer.status_code == 409, (bad, answer.text)
        assert "Validation failed" in answer.json()["detail"]
    assert len(stack.runs_of("backfill")) == before


def test_reindex_event_starts_a_run_with_the_payload_roots(stack):
    share = _share(stack.tmp / "docs-event", {"event.md": "# Event\n\nTriggered by CI.\n"})
    done = cli(stack, "event", "emit", "kbsync.reindex.requested",
               "--resource-id", "kbsync.ci.tests", "--payload", json.dumps({"roots": [str(share)]}))
    assert done.returncode == 0, done.stdout + done.stderr

    def triggered() -> list[dict]:
        return [r for r in stack.runs_of("ci-reindex")
                if (r["created_by"] or {}).get("type") == "AUTOMATION"]

    (run,) = wait_for(triggered, 60, "the automation's flow run")
    # The single-expression template kept its JSON type (a list) and the default namespace.
    assert run["parameters"] == {"roots": [str(share)], "namespace": "default"}
    final = wait_for(lambda: stack.state(run["id"]) in {"Completed", "Failed", "Crashed"}
                      and stack.state(run["id"]), 150, "the triggered run to finish")
    assert final == "Completed"

    # Without roots in the payload the automation's action fails and no run starts.
    done = cli(stack, "event", "emit", "kbsync.reindex.requested",
               "--resource-id", "kbsync.ci.tests", "--payload", json.dumps({"namespace": "x"}))
    assert done.returncode == 0, done.stdout + done.stderr
    event_id = re.search(r"with ID\s+([0-9a-f-]{36})", done.stdout).group(1)

    def action_failed() -> list[dict]:
        events = stack.post("/events/filter", {"filter": {"event": {
            "name": ["prefect.automation.action.failed"]}}, "limit": 50})["events"]
        return [e for e in events
                if any(r["prefect.resource.id"] == f"prefect.event.{event_id}"
                       for r in e["related"])]

    (failed,) = wait_for(action_failed, 60, "the automation to report its failed action")
    assert failed["payload"]["reason"].startswith("Unable to create flow run")
    assert len(triggered()) == 1


def test_cancelled_backfill_keeps_the_index_consistent_and_the_next_run_finishes(stack):
    count = 600  # one-file batches now run at tens a second: enough that the cancel lands mid-run
    share = _share(stack.tmp / "big", {f"doc{i:03d}.md": f"# Doc {i}\n\n" + f"Topic {i}. " * 40
                                       for i in range(count)})
    roots = f"roots={json.dumps([str(share)])}"
    # One file per batch so the run is long enough to be cancelled in the middle.
    started = cli(stack, "deployment", "run", "ingest/backfill", "--param", roots,
                  "--param", "namespace=cancel", "--job-variable",
                  'env={"KBSYNC_FILES_PER_BATCH": "1", "KBSYNC_LOCK_TIMEOUT_S": "600"}')
    assert started.returncode == 0, started.stdout + started.stderr
    run_id = _run_id(started.stdout)

    def some_documents_written() -> bool:
        children = [c["id"] for c in stack.children(run_id)]
        return bool(children) and bool(stack.post("/task_runs/filter", {"task_runs": {
            "flow_run_id": {"any_": children}, "name": {"like_": "batch "},
            "state": {"type": {"any_": ["COMPLETED"]}}}}))

    wait_for(some_documents_written, 120, "the first written batch")
    stack.cancel(run_id)
    wait_for(lambda: stack.state(run_id) == "Cancelled", 90, "the cancellation")

    again = cli(stack, "deployment", "run", "ingest/backfill", "--param", roots,
                "--param", "namespace=cancel", "--watch", "--watch-timeout", "180", timeout=240)
    assert again.returncode == 0, again.stdout + stack.story(_run_id(again.stdout))
    summary = {a["key"]: a for a in stack.artifacts([_run_id(again.stdout)])}
    metrics = _metrics(summary["kbsync-ingest-cancel"]["data"])
    # Documents committed before the cancel are unchanged, the rest are added; nothing lost.
    assert metrics["failed"] == "0" and int(metrics["unchanged"]) >= 1
    assert int(metrics["added"]) >= 1
    assert int(metrics["added"]) + int(metrics["unchanged"]) == count
    stats = subprocess.run([KBSYNC, "stats", "--namespace", "cancel", "--json"],
                           env=stack.worker_env, capture_output=True, text=True, timeout=120)
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["namespaces"]["cancel"]["documents"] == count


@pytest.mark.skipif(not HAS_EVALUATE, reason="flows/evaluate.py is not written yet (issue 6)")
def test_completed_nightly_sync_triggers_evaluate(stack):
    share = _share(stack.tmp / "nightly", {"n.md": "# Nightly\n\nSome text.\n"})
    # Other tests' nightly syncs trigger evaluate runs too: this test's is the one that is new.
    before = {r["id"] for r in stack.runs_of("evaluate")}
    done = cli(stack, "deployment", "run", "ingest/nightly-sync", "--param",
               f"roots={json.dumps([str(share)])}", "--param", "namespace=nightly",
               "--watch", "--watch-timeout", "180", timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    (run,) = wait_for(lambda: [r for r in stack.runs_of("evaluate") if r["id"] not in before],
                      60, "the evaluate run")
    assert run["created_by"]["type"] == "AUTOMATION"
    assert run["parameters"]["queries_file"] == "data/eval/sample_queries.jsonl"
    # No worker serves the evaluate queue here (the flow is tested in tests/flows): withdraw it.
    assert run["state_name"] == "Scheduled"
    stack.cancel(run["id"])
    wait_for(lambda: stack.state(run["id"]) == "Cancelled", 30, "the evaluate run to go")


def _nightly(stack, share: Path, namespace: str) -> subprocess.CompletedProcess:
    return cli(stack, "deployment", "run", "ingest/nightly-sync", "--param",
               f"roots={json.dumps([str(share)])}", "--param", f"namespace={namespace}",
               "--watch", "--watch-timeout", "180", timeout=240)


def _documents(stack, namespace: str) -> int:
    stats = subprocess.run([KBSYNC, "stats", "--namespace", namespace, "--json"],
                           env=stack.worker_env, capture_output=True, text=True, timeout=120)
    assert stats.returncode == 0, stats.stderr
    return json.loads(stats.stdout)["namespaces"][namespace]["documents"]


def test_nightly_sync_mirrors_deletions_and_refuses_an_emptied_share(stack):
    share = _share(stack.tmp / "mirror", {f"m{i}.md": f"# Mirror {i}\n\nText {i}.\n"
                                          for i in range(4)})
    assert _nightly(stack, share, "mirror").returncode == 0
    assert _documents(stack, "mirror") == 4
    (share / "m0.md").unlink()  # deleted from the share: gone after one nightly run
    again = _nightly(stack, share, "mirror")
    assert again.returncode == 0, again.stdout + again.stderr
    assert _documents(stack, "mirror") == 3
    for path in share.iterdir():  # an emptied (unmounted?) share: the guard refuses the run
        path.unlink()
    refused = _nightly(stack, share, "mirror")
    assert refused.returncode != 0
    assert _documents(stack, "mirror") == 3


def test_secret_block_reaches_the_run_env_and_is_stored_nowhere_else(stack):
    """The OPERATIONS.md recipe: Secret block -> pool job template -> flow-run env."""
    import asyncio

    from prefect.blocks.system import Secret
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.workers.process import ProcessJobConfiguration

    value = "sk-test-" + os.urandom(6).hex()
    with temporary_settings({PREFECT_API_URL: stack.api}):
        Secret(value=value).save("kbsync-embed-api-key", overwrite=True)
    template = stack.tmp / "kbsync-pool.json"
    made = subprocess.run([sys.executable, str(ROOT / "deployments" / "pool_template.py"),
                           "--secret", "KBSYNC_EMBED_API_KEY=kbsync-embed-api-key"],
                          env=stack.env, capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    template.write_text(made.stdout)
    updated = cli(stack, "work-pool", "update", POOL, "--base-job-template", str(template))
    assert updated.returncode == 0, updated.stdout + updated.stderr
    # What the worker computes for a ci-reindex run: pool env + deployment env, blocks resolved.
    pool = stack.get(f"/work_pools/{POOL}")
    deployment = stack.deployments()["ci-reindex"]
    with temporary_settings({PREFECT_API_URL: stack.api}):
        config = asyncio.run(ProcessJobConfiguration.from_template_and_values(
            pool["base_job_template"], deployment["job_variables"]))
    assert config.env["KBSYNC_EMBED_API_KEY"] == value
    assert config.env["KBSYNC_LOCK_TIMEOUT_S"] == "1800"
    stored = json.dumps([pool, stack.deployments(), stack.post("/automations/filter")])
    assert value not in stored and "prefect.blocks.secret.kbsync-embed-api-key" in stored


def test_serve_registers_and_stops_cleanly_on_sigterm(stack):
    """serve.py re-registers the deployments and pauses them when it stops."""
    with redeployed_after(stack, DEPLOY_ARGS):
        _serve_registers_and_stops_cleanly(stack)


def _serve_registers_and_stops_cleanly(stack) -> None:
    log = stack.tmp / "serve.log"
    names = [a for n in INGEST_DEPLOYMENTS for a in ("--only", n)]
    before = {n: d["updated"] for n, d in stack.deployments().items()}
    # DEBUG shows the runner's first poll, i.e. that it has started and owns SIGTERM.
    env = {**stack.worker_env, "PREFECT_LOGGING_LEVEL": "DEBUG", "PYTHONUNBUFFERED": "1",
           "PREFECT_RUNNER_POLL_FREQUENCY": "1"}
    proc = start([sys.executable, str(ROOT / "deployments" / "serve.py"), *names], env, log)
    try:
        def polling() -> bool:
            assert proc.poll() is None, f"serve.py exited:\n{tail(log)}"
            return re.search(r"Discovered \d+ scheduled flow runs", log.read_text(errors="replace"))

        wait_for(polling, 90, "serve.py's runner to poll")
        deps = stack.deployments()
        assert all(deps[n]["updated"] != before[n] and not deps[n]["paused"]
                   for n in INGEST_DEPLOYMENTS)
        assert "Your deployments are being served" in log.read_text()
        code = stop(proc, signal.SIGTERM, timeout=30)
    finally:
        stop(proc, signal.SIGKILL, timeout=5)
    assert code == 0, tail(log)
    # The runner's clean shutdown path paused what it served.
    assert all(stack.deployments()[n]["paused"] for n in INGEST_DEPLOYMENTS)
