"""A CLI ingest with nothing to write, recorded at the Prefect API over its REST API.

Why (issue 42): against a running Prefect server a no-op ``kbsync ingest`` of 300 pages took
3.1-3.9 s wall, of which the run's own work was 0.2 s; the rest was importing Prefect and the
flow (1.2-1.7 s) and the flow run's own machinery. Nothing in a no-op needs Prefect's engine:
no task, no subflow, no retry. So the CLI plans first in process (``kbsync.app.cli_ingest``),
and when no root has anything to write, it records the run here with a handful of HTTP
calls (the standard library's ``urllib``; Prefect is not imported).

What is recorded is what the ``ingest`` flow records for such a run, so the Prefect UI reads
the same: a flow run of the flow ``ingest`` (the same name from
:func:`kbsync.ingest.run_record.ingest_name`, parameters, flow version), Running from the
run's start and then Completed (``Completed with known failures``, or Failed on a new
failed file, by the flow's rule), its log lines (the runner's, then one WARNING per failed
file, the embedding model and the count line), the summary artifact and failures table
under their keys, and the ``kbsync.sync.finished`` event with the run and its flow as
related resources. What it does not have: the flow's check task runs (a no-op spends its
time in them, and runs them in process here), and the flow's watchdog (the run is a
fraction of a second).

Limits: spoken only when every Prefect API setting is one this client honours
(:func:`rest_settings`: the URL of a self-hosted server and its basic-auth string, from the
environment or the active profile); anything else (Prefect Cloud's API key, TLS options,
custom headers) goes through Prefect's own client, as every run with work does.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kbsync.errors import OrchestratorUnavailable

log = logging.getLogger(__name__)

UNSPOKEN = ("PREFECT_API_KEY", "PREFECT_API_TLS_INSECURE_SKIP_VERIFY", "PREFECT_API_SSL_CERT_FILE",
            "PREFECT_CLIENT_CUSTOM_HEADERS")
"""Client settings that change how Prefect's own client reaches the API: any of them set
leaves the run to that client. ``PREFECT_API_KEY`` means Prefect Cloud, whose API this client
was not tested against (its events come in over a websocket). Server-side settings (the
database, services) do not matter here; a server that refuses these requests (CSRF
protection on, say) refuses the first one, and the flow records the run instead."""
TIMEOUT_S = 10.0
"""Seconds one request may take (a local server answers in milliseconds)."""
FLOW_NAME = "ingest"
FLOW_FILE = Path(__file__).resolve().parents[2] / "flows" / "ingest.py"
"""The ``ingest`` flow's source: Prefect's flow version is the md5 of this file."""


class KeptRecords(logging.Handler):
    """A handler that keeps the records it is given, in ``kept``, for a run's log."""

    def __init__(self, kept: list[logging.LogRecord]) -> None:
        super().__init__()
        self.kept = kept

    def emit(self, record: logging.LogRecord) -> None:
        self.kept.append(record)


class RestFailed(Exception):
    """A request to the Prefect API failed (no answer, or an error status)."""


def prefect_settings() -> dict[str, str]:
    """Prefect's settings as Prefect reads them for a run: the active profile of
    ``$PREFECT_HOME/profiles.toml``, then the environment over it (read without importing
    Prefect, whose import costs 1-2 s). Limit: ``prefect.toml`` and ``pyproject.toml`` are
    not read."""
    home = Path(os.environ.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()
    path = Path(os.environ.get("PREFECT_PROFILES_PATH") or home / "profiles.toml").expanduser()
    values: dict[str, str] = {}
    try:
        import tomllib

        profiles = tomllib.loads(path.read_text(encoding="utf-8"))
        active = os.environ.get("PREFECT_PROFILE") or profiles.get("active") or "ephemeral"
        found = profiles.get("profiles", {}).get(active, {})
        if isinstance(found, dict):
            values = {str(k): str(v) for k, v in found.items()}
    except (OSError, ValueError, AttributeError):
        pass
    values.update({k: v for k, v in os.environ.items() if k.startswith("PREFECT_")})
    return values


def rest_settings() -> dict[str, str] | None:
    """The API settings when this client can honour every one of them, else None."""
    values = prefect_settings()
    url = values.get("PREFECT_API_URL", "")
    if not url.startswith(("http://", "https://")) or "/accounts/" in url:  # Cloud's URLs
        return None
    if any(values.get(key) for key in UNSPOKEN):
        return None
    return {k: values[k] for k in ("PREFECT_API_URL", "PREFECT_API_AUTH_STRING") if values.get(k)}


class PrefectRest:
    """The few calls of Prefect's REST API a recorded no-op needs.

    Args:
        settings: :func:`rest_settings`' values.
    """

    def __init__(self, settings: dict[str, str]) -> None:
        self.url = settings["PREFECT_API_URL"].rstrip("/")
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if settings.get("PREFECT_API_AUTH_STRING"):  # a self-hosted server's basic auth
            token = base64.b64encode(settings["PREFECT_API_AUTH_STRING"].encode()).decode()
            self.headers["Authorization"] = f"Basic {token}"

    @classmethod
    def from_environment(cls) -> PrefectRest | None:
        """A client for the configured API, or None when Prefect's own client is needed."""
        settings = rest_settings()
        return cls(settings) if settings else None

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """``method path`` with ``body`` as JSON; the JSON answer (None when empty).

        Raises:
            RestFailed: no answer within :data:`TIMEOUT_S`, or an error status.
        """
        import urllib.error
        import urllib.request

        data = None if body is None else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers=self.headers)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:  # noqa: S310
                raw = answer.read()
        except urllib.error.HTTPError as exc:
            raise RestFailed(f"{method} {path}: HTTP {exc.code} {exc.reason}") from None
        except (OSError, ValueError) as exc:  # URLError, refused, timed out
            raise RestFailed(f"{method} {path}: {getattr(exc, 'reason', exc)}") from None
        try:
            return json.loads(raw) if raw.strip() else None
        except ValueError:
            raise RestFailed(f"{method} {path}: the answer is not JSON") from None

    def flow_id(self, name: str = FLOW_NAME) -> str:
        """The id of the flow ``name`` (made when the API has none yet, as Prefect does)."""
        return str(self.call("POST", "/flows/", {"name": name})["id"])

    def start_run(self, flow_id: str, parameters: dict) -> str:
        """A flow run of ``flow_id``, Running from now; its id."""
        from kbsync.ingest.run_record import ingest_name

        return str(self.call("POST", "/flow_runs/", {
            "flow_id": flow_id, "name": ingest_name(parameters), "parameters": parameters,
            "flow_version": _flow_version(), "state": _state("RUNNING", "Running")})["id"])

    def forget_run(self, run_id: str) -> None:
        """Delete the flow run ``run_id`` (a run handed over to the flow before it did
        anything); best effort: a run left Running says so in the log."""
        try:
            self.call("DELETE", f"/flow_runs/{run_id}")
        except RestFailed as exc:
            log.warning("could not delete the flow run %s at the Prefect API (%s); the "
                        "ingest goes on in a new flow run", run_id, exc)

    def crash_run(self, run_id: str, why: str) -> None:
        """End the flow run ``run_id`` Crashed with ``why`` (best effort: the error that
        ended the command is what the person reads)."""
        try:
            self.call("POST", f"/flow_runs/{run_id}/set_state",
                      {"state": _state("CRASHED", "Crashed", why), "force": True})
        except RestFailed:
            pass

    def latest_table_doc_ids(self, key: str) -> set[str]:
        """The doc_ids of the latest version of the table artifact ``key``; empty when there
        is none or it cannot be read (every failure is then new, as in the flow)."""
        from kbsync.ingest.run_record import doc_ids_of_table

        try:
            latest = self.call("GET", f"/artifacts/{key}/latest")
        except RestFailed:
            return set()
        return doc_ids_of_table(latest.get("data") if isinstance(latest, dict) else None)


@dataclass
class IdleRun:
    """A CLI ingest that wrote nothing, ready to record: its flow run's id and its flow's,
    its flow parameters, JSON summary, end (epoch seconds), embedder description and the
    runner's log records."""

    run_id: str
    flow_id: str
    parameters: dict
    summary: dict
    ended: float
    embedder: str
    records: list[logging.LogRecord] = field(default_factory=list)


def record_idle_run(api: PrefectRest, run: IdleRun) -> None:
    """Record ``run`` in its flow run (made by :meth:`PrefectRest.start_run`), and end it.

    Raises:
        OrchestratorUnavailable: the API stopped answering on the way (one line; the run's
            own work is done and stands, only its record is incomplete).
    """
    from kbsync.ingest.run_record import (KNOWN_FAILURES_NAME, failed_message, ingest_name,
                                          known_message, run_outcome)

    summary = run.summary
    key = _key("kbsync-ingest-failures", summary)
    known = api.latest_table_doc_ids(key) if summary["failed"] else set()
    new = [f for f in summary["failures"] if f.get("doc_id") not in known]
    outcome = run_outcome(summary, new=len(new))
    if new:
        final = _state("FAILED", "Failed", failed_message(summary, new=len(new)))
    elif summary["failed"]:
        final = _state("COMPLETED", KNOWN_FAILURES_NAME, known_message(summary))
    else:
        final = _state("COMPLETED", "Completed")
    name, run_id = ingest_name(run.parameters), run.run_id
    try:
        api.call("POST", "/logs/", _logs(run, run_id, known))
        _artifacts(api, run, run_id, outcome)
        if not summary["dry_run"]:
            api.call("POST", "/events", [_finished_event(summary, run_id, name, run.flow_id)])
        api.call("POST", f"/flow_runs/{run_id}/set_state", {"state": final, "force": True})
    except RestFailed as exc:
        raise OrchestratorUnavailable(
            f"the Prefect API at {api.url} stopped answering while this run was recorded "
            f"({exc}); the run itself finished and wrote nothing") from None


def _key(prefix: str, summary: dict) -> str:
    from kbsync.ingest.report import artifact_key

    return artifact_key(prefix, summary["namespace"])


def _when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat()


def _state(kind: str, name: str, message: str | None = None) -> dict:
    """A state to set (the API stamps its time: a state set now is a state of now)."""
    return {"type": kind, "name": name, "message": message}


def _flow_version() -> str | None:
    """Prefect's version of the ``ingest`` flow: the md5 of its source file."""
    try:
        return hashlib.md5(FLOW_FILE.read_bytes(), usedforsecurity=False).hexdigest()
    except OSError:
        return None


def _logs(run: IdleRun, run_id: str, known: set[str]) -> list[dict]:
    """The run's log: the runner's records, then the flow's closing lines."""
    from kbsync.ingest.report import count_line, log_failures

    closing = logging.Logger("prefect.flow_runs")  # the flow's run logger; not in the tree
    kept: list[logging.LogRecord] = []
    closing.addHandler(KeptRecords(kept))
    log_failures(closing, run.summary, known=known)
    closing.info("embedding model: %s", run.embedder)
    closing.info("%s", count_line(run.summary))
    for record in kept:
        record.created = run.ended
    return [{"name": r.name, "level": r.levelno, "message": r.getMessage(),
             "timestamp": _when(r.created), "flow_run_id": run_id}
            for r in [*run.records, *kept]]


def _artifacts(api: PrefectRest, run: IdleRun, run_id: str, outcome: str) -> None:
    """The summary and the failures table, as :func:`tasks.artifacts.publish_summary`."""
    from kbsync.ingest.report import summary_markdown
    from kbsync.ingest.run_record import (failure_rows, failures_description,
                                          summary_description, summary_prefix)

    summary = run.summary
    prefix = summary_prefix(summary)
    api.call("POST", "/artifacts/", {
        "key": _key(prefix, summary), "type": "markdown", "flow_run_id": run_id,
        "data": summary_markdown(summary, outcome=outcome, embedder=run.embedder),
        "description": summary_description(summary, outcome)})
    api.call("POST", "/artifacts/", {
        "key": _key(f"{prefix}-failures", summary), "type": "table", "flow_run_id": run_id,
        "data": json.dumps(failure_rows(summary)),
        "description": failures_description(summary)})


def _finished_event(summary: dict, run_id: str, name: str, flow_id: str) -> dict:
    """:func:`tasks.events.sync_finished`'s event, with the related resources Prefect adds
    inside a flow run (the run and its flow; a CLI run has no deployment)."""
    from kbsync.ingest.run_record import (SYNC_FINISHED, sync_finished_payload,
                                          sync_finished_resource)

    return {
        "id": str(uuid.uuid4()), "occurred": _when(datetime.now(timezone.utc).timestamp()),
        "event": SYNC_FINISHED, "resource": sync_finished_resource(summary),
        "related": [
            {"prefect.resource.id": f"prefect.flow-run.{run_id}",
             "prefect.resource.role": "flow-run", "prefect.resource.name": name},
            {"prefect.resource.id": f"prefect.flow.{flow_id}",
             "prefect.resource.role": "flow", "prefect.resource.name": FLOW_NAME}],
        "payload": sync_finished_payload(summary)}
