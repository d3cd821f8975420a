"""Prefect artifacts of an ingest run: summary, failures table, progress."""

from __future__ import annotations

from typing import cast
from uuid import UUID

from prefect.artifacts import (create_markdown_artifact, create_progress_artifact,
                               create_table_artifact, update_progress_artifact)

from kbsync.errors import KbsyncError
from kbsync.ingest.report import artifact_key, summary_markdown
from kbsync.ingest.run_record import (doc_ids_of_table, failure_rows,  # noqa: F401
                                      failures_description, summary_description,
                                      summary_prefix)
from tasks.run_story import refusal_markdown


def publish_summary(summary: dict, *, outcome: str | None = None,
                    embedder: str | None = None) -> None:
    """Markdown summary and failures table, each under a stable key per namespace
    (history across runs).

    The summary's description starts with the run's ``outcome`` (``ok``, ``failed: ...``,
    ``completed: ...``; a stopped run's says ``stopped: KIND``), so the key's history,
    stopped runs included, reads as a list of outcomes. The failures table is written on
    every run, empty after a clean one, so an old failure never stands beside a new
    "(ok)". Dry runs have keys of their own: their counts mean "would do".
    """
    prefix = summary_prefix(summary)
    create_markdown_artifact(key=artifact_key(prefix, summary["namespace"]),
                             markdown=summary_markdown(summary, outcome=outcome,
                                                       embedder=embedder),
                             description=summary_description(summary, outcome))
    publish_failures(summary, prefix)


def publish_failures(summary: dict, prefix: str) -> None:
    """The failures table of ``summary`` (empty: no file failed) under its stable key
    (:func:`kbsync.ingest.run_record.failure_rows`)."""
    create_table_artifact(key=artifact_key(f"{prefix}-failures", summary["namespace"]),
                          table=failure_rows(summary),
                          description=failures_description(summary))


def known_failures(namespace: str) -> set[str]:
    """doc_ids of the files that failed in the namespace's last run (the latest version of
    its failures table; dry runs never write that key): "known failures". Empty when the
    API has no such table (a first run, the CLI's temporary server) or cannot be read."""
    from prefect.artifacts import Artifact

    try:
        # Called from sync code, Prefect's async_dispatch runs the sync implementation.
        latest = cast("Artifact | None",
                      Artifact.get(artifact_key("kbsync-ingest-failures", namespace)))
    except Exception:  # noqa: BLE001 - no history to compare with: every failure is new
        return set()
    return doc_ids_of_table(latest.data if latest is not None else None)


def publish_refusal(exc: KbsyncError, *, namespace: str, dry_run: bool,
                    counts: dict | None) -> None:
    """The summary of a run a refusal or an outage ended (``RootConflict``, ``LockHeld``,
    ``EmbeddingOutage``, ...), under the run's summary key: its error in one line and the
    counts it reached. The failures table is left as it was: no file was judged, unless
    the counts name failed files (then the table lists them, as on any run)."""
    prefix = "kbsync-dry-run" if dry_run else "kbsync-ingest"
    create_markdown_artifact(
        key=artifact_key(prefix, namespace),
        markdown=refusal_markdown(str(exc.kind), str(exc), namespace, dry_run, counts),
        description=f"stopped: {exc.kind}: kbsync run of namespace {namespace}")
    if counts and counts.get("failures"):
        publish_failures(counts, prefix)


def start_progress(root_name: str) -> UUID | None:
    """A progress artifact for one root's batches (0-100)."""
    # Prefect's async_dispatch types the result "UUID | Coroutine": called from sync code,
    # as here, it runs the sync implementation, which returns the UUID.
    return cast(UUID, create_progress_artifact(progress=0.0,
                                               description=f"batches done for {root_name} "
                                               "(of those planned so far)"))


def report_progress(artifact_id: UUID | None, done: int, total: int) -> None:
    """Move the progress artifact to ``done / total``."""
    if artifact_id is not None and total:
        update_progress_artifact(artifact_id=artifact_id, progress=100.0 * done / total)
