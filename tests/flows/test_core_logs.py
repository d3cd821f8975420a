"""The core's warnings reach the flow run's logs however the run was started (#12 Logging).

Only the CLI used to set ``PREFECT_LOGGING_EXTRA_LOGGERS``, so a run started by a
worker or by ``deployments/serve.py`` lost every ``kbsync.*`` warning. Those
processes import Prefect (which reads the setting then, once) before they load
the entrypoint; the case here does the same, in a fresh interpreter without the
variable and without the CLI, loading each deployment's entrypoint by its path
as Prefect does, then reads the run's logs back from the API.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

ROOT = Path(__file__).resolve().parents[2]

RUN = """
import logging, sys

import prefect  # first, as in the flow-run process of a worker or of serve.py
from prefect import flow
from prefect.flows import load_flow_from_entrypoint

# ... which then loads the deployment's entrypoint by its path (not as flows.<name>).
load_flow_from_entrypoint(sys.argv[2], use_placeholder_flow=False)

@flow
def warn_from_the_core() -> None:
    logging.getLogger("kbsync.ingest.somewhere").warning("core warning %s", sys.argv[1])

state = warn_from_the_core(return_state=True)
print(state.state_details.flow_run_id)
"""


def _entrypoints() -> list[str]:
    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text(encoding="utf-8"))
    return sorted({deployment["entrypoint"] for deployment in spec["deployments"]})


def _run_logs(flow_run_id: str) -> list[str]:
    with get_client(sync_client=True) as client:
        logs = client.read_logs(log_filter=LogFilter(
            flow_run_id=LogFilterFlowRunId(any_=[uuid.UUID(flow_run_id)])))
    return [f"{entry.name}: {entry.message}" for entry in logs]


@pytest.mark.slow  # 30-75 s on 4 workers (docs/development.md, Tests)
@pytest.mark.parametrize("entrypoint", _entrypoints())
def test_a_core_warning_lands_in_the_logs_of_a_run_started_without_the_cli(prefect_api,
                                                                           entrypoint):
    marker = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KBSYNC_", "PREFECT_LOGGING_"))}
    env.update(PREFECT_API_URL=prefect_api, PREFECT_SERVER_ANALYTICS_ENABLED="false")
    proc = subprocess.run([sys.executable, "-c", RUN, marker, entrypoint], cwd=ROOT, env=env, check=False,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    flow_run_id = proc.stdout.strip().splitlines()[-1]
    wanted = f"kbsync.ingest.somewhere: core warning {marker}"
    deadline = time.monotonic() + 30  # the API may store a batch a moment after the run ends
    while wanted not in (lines := _run_logs(flow_run_id)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert wanted in lines, lines
    assert lines.count(wanted) == 1  # forwarded once, not once per handler copy
