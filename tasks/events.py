"""The events kbsync's runs emit for automations to react to."""

from __future__ import annotations

from prefect.events import emit_event

SYNC_FINISHED = "kbsync.sync.finished"
"""Emitted by a (not dry) ingest run that did its work: Completed, or Failed only because
files failed (exit 3). Not by a refusal or an outage. The ``evaluate`` deployment's
trigger expects it, so one bad file on a share does not skip that night's evaluation
(``prefect.flow-run.Completed`` alone did). Emitted inside the flow run, it carries the
run, its flow and its deployment as related resources (what the trigger matches)."""


def sync_finished(summary: dict) -> None:
    """Emit :data:`SYNC_FINISHED` for ``summary`` (namespace and counts in the payload)."""
    emit_event(event=SYNC_FINISHED,
               resource={"prefect.resource.id": f"kbsync.sync.{summary['run_id']}",
                         "prefect.resource.name": summary["namespace"]},
               payload={key: summary[key] for key in (
                   "namespace", "mode", "files_seen", "added", "updated", "deleted", "failed")})
