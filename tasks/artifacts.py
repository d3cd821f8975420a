"""Prefect artifacts of an ingest run: summary, failures table, progress."""

from __future__ import annotations

from uuid import UUID

from prefect.artifacts import (create_markdown_artifact, create_progress_artifact,
                               create_table_artifact, update_progress_artifact)

from kbsync.report import artifact_key, summary_markdown


def publish_summary(summary: dict) -> None:
    """Markdown summary (stable key per namespace: history across runs) and failures table."""
    ns = summary["namespace"]
    create_markdown_artifact(key=artifact_key("kbsync-ingest", ns),
                             markdown=summary_markdown(summary),
                             description=f"kbsync ingest summary for namespace {ns}")
    if summary["failures"]:
        rows = [{"path": f["path"], "doc_id": f["doc_id"], "error": f["error"],
                 "message": f["message"]} for f in summary["failures"]]
        create_table_artifact(key=artifact_key("kbsync-ingest-failures", ns), table=rows,
                              description=f"files that failed in namespace {ns}")


def start_progress(root_name: str) -> UUID | None:
    """A progress artifact for one root's batches (0-100)."""
    return create_progress_artifact(progress=0.0, description=f"batches done for {root_name}")


def report_progress(artifact_id: UUID | None, done: int, total: int) -> None:
    """Move the progress artifact to ``done / total``."""
    if artifact_id is not None and total:
        update_progress_artifact(artifact_id=artifact_id, progress=100.0 * done / total)
