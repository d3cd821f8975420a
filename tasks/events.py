"""The events kbsync's runs emit for automations to react to.

:data:`SYNC_FINISHED` (``kbsync.sync.finished``) is emitted by a (not dry) ingest run that did
its work: Completed, or Failed only because files failed (exit 3). Not by a refusal or an
outage. The ``evaluate`` deployment's trigger expects it, so one bad file on a share does not
skip that night's evaluation (``prefect.flow-run.Completed`` alone did). Emitted inside the
flow run, it carries the run, its flow and its deployment as related resources (what the
trigger matches). Its name, resource and payload are :mod:`kbsync.ingest.run_record`'s, which
the CLI's record of a run with nothing to write sends too.
"""

from __future__ import annotations

from prefect.events import emit_event

from kbsync.ingest.run_record import (SYNC_FINISHED, sync_finished_payload,
                                      sync_finished_resource)

__all__ = ["SYNC_FINISHED", "sync_finished"]


def sync_finished(summary: dict) -> None:
    """Emit :data:`SYNC_FINISHED` for ``summary`` (namespace and counts in the payload)."""
    emit_event(event=SYNC_FINISHED, resource=sync_finished_resource(summary),
               payload=sync_finished_payload(summary))
