"""Serve kbsync's deployments from one long-running process, without a work pool.

    python deployments/serve.py                                  # all of prefect.yaml
    python deployments/serve.py --only nightly-sync --only ci-reindex

The deployments are read from ``prefect.yaml``, so this route and the work-pool
route (``prefect deploy --all`` + ``python deployments/worker.py``)
register the same names, parameters, schedules, concurrency limits and
triggers; only the work pool and the pull step differ. It also registers
prefect.yaml's top-level automations (the heartbeat crash detection), as
``deployments/automations.py`` does on the work-pool route. Flow runs execute as
subprocesses of this process, in the project directory, with this process's
environment: export ``KBSYNC_*`` settings and secrets before starting it.

The first SIGTERM or Ctrl-C stops it cleanly (exit 0): in-flight runs are
cancelled (the next run finishes their work) and the served deployments are
paused until the next start, so no backlog of late runs piles up while nothing
is serving them. Under systemd use ``KillMode=mixed`` (docs/OPERATIONS.md): the
runner ends its flow-run processes itself; only stragglers get SIGKILL.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence, cast

import httpx
import yaml

from deployments.automations import load_automations, sync_automations

if TYPE_CHECKING:
    from prefect.deployments.runner import RunnerDeployment

PROJECT_DIR = Path(__file__).resolve().parent.parent
PREFECT_FILE = PROJECT_DIR / "prefect.yaml"

log = logging.getLogger("kbsync.serve")


def load_specs(prefect_file: Path = PREFECT_FILE) -> list[dict[str, Any]]:
    """The ``deployments`` entries of a prefect.yaml (YAML anchors and merge keys resolved).

    Raises:
        ValueError: the file has no deployments, or one lacks a name or an entrypoint.
    """
    data = yaml.safe_load(Path(prefect_file).read_text(encoding="utf-8")) or {}
    specs = data.get("deployments") or []
    if not specs:
        raise ValueError(f"{prefect_file} defines no deployments")
    for spec in specs:
        if not spec.get("name") or not spec.get("entrypoint"):
            raise ValueError(f"{prefect_file}: every deployment needs a name and an entrypoint")
    return specs


def shared_env(specs: Sequence[dict[str, Any]]) -> dict[str, str]:
    """The ``work_pool.job_variables.env`` of the specs, which must agree.

    One process serves every deployment, so per-deployment environments cannot be
    honoured; conflicting values are refused rather than one silently winning.
    """
    env: dict[str, str] = {}
    for spec in specs:
        job_env = ((spec.get("work_pool") or {}).get("job_variables") or {}).get("env") or {}
        for key, value in job_env.items():
            if key in env and env[key] != str(value):
                raise ValueError(f"deployments disagree on {key}; serve them separately")
            env[key] = str(value)
    return env


def to_runner_deployment(spec: dict[str, Any]) -> RunnerDeployment:
    """A ``RunnerDeployment`` equivalent to one prefect.yaml entry (minus pool and pull).

    Supports what kbsync's prefect.yaml uses: cron schedules with timezone,
    ``concurrency_limit`` as an int or ``{limit, collision_strategy}``, event
    triggers, parameters, tags, description and ``enforce_parameter_schema``.

    Raises:
        ValueError: a schedule other than cron (kept out rather than dropped silently).
        prefect.exceptions.ScriptError: the entrypoint cannot be imported.
    """
    from prefect.client.schemas.objects import ConcurrencyLimitConfig
    from prefect.events import DeploymentTriggerTypes, TriggerTypes
    from prefect.flows import Flow, load_flow_from_entrypoint
    from prefect.schedules import Cron
    from pydantic import TypeAdapter

    name = spec["name"]
    flow: Flow[..., Any] = load_flow_from_entrypoint(spec["entrypoint"],
                                                     use_placeholder_flow=False)
    schedules = []
    for item in spec.get("schedules") or []:
        if "cron" not in item:
            raise ValueError(f"{name}: serve.py supports cron schedules only, got {item}")
        schedules.append(Cron(item["cron"], timezone=item.get("timezone"),
                              active=item.get("active", True)))
    limit = spec.get("concurrency_limit")
    if isinstance(limit, dict):
        limit = ConcurrencyLimitConfig(**limit)
    adapter = TypeAdapter(DeploymentTriggerTypes)
    triggers: list[DeploymentTriggerTypes | TriggerTypes] = []
    for number, trigger in enumerate(spec.get("triggers") or [], 1):
        # Same default name as `prefect deploy`, so both routes own the same automations.
        triggers.append(adapter.validate_python({"name": f"{name}__automation_{number}",
                                                 **trigger}))
    # Prefect's async_dispatch types the result "RunnerDeployment | Coroutine": called from
    # sync code, as here, it runs the sync implementation, which returns the deployment.
    return cast("RunnerDeployment", flow.to_deployment(
        name=name,
        description=spec.get("description"),
        tags=spec.get("tags"),
        parameters=spec.get("parameters") or {},
        schedules=schedules or None,
        concurrency_limit=limit,
        triggers=triggers or None,
        enforce_parameter_schema=spec.get("enforce_parameter_schema", True),
    ))


def select(specs: Sequence[dict[str, Any]], only: Sequence[str]) -> list[dict[str, Any]]:
    """The specs named in ``only`` (all when empty); unknown names raise ValueError."""
    if not only:
        return list(specs)
    known = {spec["name"] for spec in specs}
    unknown = sorted(set(only) - known)
    if unknown:
        raise ValueError(f"unknown deployment(s) {unknown}; prefect.yaml has {sorted(known)}")
    return [spec for spec in specs if spec["name"] in only]


def _stop_before_start(signum: int, frame: object) -> None:
    # Until the runner installs its own SIGTERM handler, a stop request during
    # registration is still a clean stop: nothing is running yet.
    raise SystemExit(0)


def main(argv: Sequence[str] | None = None) -> int:
    """Register the selected deployments and serve them until SIGTERM or Ctrl-C."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help="serve only this deployment (repeatable; default: all)")
    parser.add_argument("--limit", type=int, default=None, metavar="N",
                        help="at most N flow runs at once in this process")
    parser.add_argument("--prefect-file", type=Path, default=PREFECT_FILE)
    args = parser.parse_args(argv)
    prefect_file = args.prefect_file.resolve()  # before the chdir below
    # Prefect logs the runner itself; keep third-party chatter (httpx) at WARNING.
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    log.setLevel(logging.INFO)
    signal.signal(signal.SIGTERM, _stop_before_start)

    # Entrypoints and relative roots (data/sample) resolve against the project directory,
    # exactly as on a worker whose pull step sets it as the working directory.
    os.chdir(PROJECT_DIR)
    try:
        specs = select(load_specs(prefect_file), args.only)
        env = shared_env(specs)
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    for key, value in env.items():
        # The caller's environment wins: these are defaults, as for a worker's job env.
        os.environ.setdefault(key, value)
    try:
        automations = load_automations(prefect_file)
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    try:
        sync_automations(automations)
    except httpx.HTTPError as exc:  # server down or refusing: one line, exit 1
        log.error("cannot register automations: %s: %s", type(exc).__name__, exc)
        return 1
    deployments = [to_runner_deployment(spec) for spec in specs]
    log.info("serving %s from %s", [d.name for d in deployments], PROJECT_DIR)

    from prefect import serve

    # Prefect's runner owns SIGTERM from here: it cancels in-flight runs and returns.
    serve(*deployments, limit=args.limit)
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
