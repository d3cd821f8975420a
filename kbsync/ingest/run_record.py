"""What an ingest run's record says, in words: its name, its outcome, its failures table.

Pure functions of the run's parameters and JSON summary, without Prefect, shared by the two
writers of an ingest's record at a Prefect API: the ``ingest`` flow (``tasks``) and the
CLI's record of a run with nothing to write (:mod:`kbsync.app.prefect_rest`), so both
name, judge and tabulate a run the same way.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from kbsync.ingest.report import escape_controls, short_message

NAME_LIMIT = 120
"""Characters of a run name at most (the rest is cut with an ellipsis)."""


def root_label(spec: str) -> str:
    """The name a root's doc_ids start with: ``NAME`` of ``NAME=PATH``, else the path's last
    part (as :func:`kbsync.ingest.discover.parse_root` decides, without touching the path)."""
    name, sep, path = str(spec).partition("=")
    if sep and name and "/" not in name:
        return name
    parts = [p for p in str(spec).rstrip("/").split("/") if p]
    return parts[-1] if parts else str(spec)


def joined(values: Iterable[Any]) -> str:
    """``a,b,c``: a run name's list of values."""
    return ",".join(str(v) for v in values)


def run_name_text(text: str) -> str:
    """``text`` as a run name: control characters escaped, one line, at most
    :data:`NAME_LIMIT` characters."""
    text = " ".join(escape_controls(text).split())
    return text if len(text) <= NAME_LIMIT else text[:NAME_LIMIT - 1] + "…"


def ingest_name(params: dict[str, Any], prefix: str = "ingest") -> str:
    """``PREFIX: ROOTS MODE[ dry-run]`` for the ``ingest`` flow's parameters."""
    mode = params.get("mode", "incremental")
    mode = getattr(mode, "value", mode)
    roots = joined(root_label(r) for r in params.get("roots") or [])
    force = " force" if params.get("force") else ""
    dry = " dry-run" if params.get("dry_run") else ""
    return run_name_text(f"{prefix}: {roots} {mode}{force}{dry}")


def run_outcome(summary: dict, *, new: int) -> str:
    """The run's outcome in words, as its summary's title and outcome row show it: ``ok``,
    ``failed: N new failed files`` (the run is Failed), or ``completed: N known failed
    files`` (each failed in the last run too; the run is not Failed)."""
    failed = summary.get("failed", 0)
    if not failed:
        return "ok"
    if new:
        known = failed - new
        return (f"failed: {new} new failed file{'s' if new != 1 else ''}"
                + (f", {known} known" if known else ""))
    return f"completed: {failed} known failed file{'s' if failed != 1 else ''} (none new)"


SYNC_FINISHED = "kbsync.sync.finished"
"""The event an ingest run that did its work emits (``tasks.events``: when and why)."""


def sync_finished_resource(summary: dict) -> dict[str, str]:
    """The resource :data:`SYNC_FINISHED` is about: the run's sync, named by its namespace."""
    return {"prefect.resource.id": f"kbsync.sync.{summary['run_id']}",
            "prefect.resource.name": summary["namespace"]}


def sync_finished_payload(summary: dict) -> dict:
    """The payload of :data:`SYNC_FINISHED`: the namespace and the run's counts."""
    return {key: summary[key] for key in (
        "namespace", "mode", "files_seen", "added", "updated", "deleted", "failed")}


def failed_message(summary: dict, *, new: int) -> str:
    """The message of a run that ends Failed on ``new`` new failed files."""
    message = f"{summary['failed']} of {summary['files_seen']} files failed"
    return message + (f" ({new} new)" if new < summary["failed"] else "")


KNOWN_FAILURES_NAME = "Completed with known failures"
"""The state name of a run whose failed files all failed in the namespace's last run too."""


def known_message(summary: dict) -> str:
    """The message of a run completed with known failures only."""
    return (f"{summary['failed']} of {summary['files_seen']} files failed, "
            "each as in the last run (none new)")


def summary_prefix(summary: dict) -> str:
    """The artifact keys' prefix: dry runs have keys of their own (their counts mean
    "would do")."""
    return "kbsync-dry-run" if summary["dry_run"] else "kbsync-ingest"


def summary_description(summary: dict, outcome: str | None) -> str:
    """The summary artifact's description: the outcome first, so the key's history reads
    as a list of outcomes."""
    what = "dry run (would do)" if summary["dry_run"] else "ingest"
    said = f"{outcome}: " if outcome else ""
    return f"{said}kbsync {what} summary for namespace {summary['namespace']}"


def failure_rows(summary: dict) -> list[dict]:
    """The failures table's rows: each message whole (only the file's path is left out:
    the row names it)."""
    return [{"path": f["path"], "doc_id": f["doc_id"], "error": f["error"],
             "message": short_message(f, limit=None)} for f in summary["failures"]]


def failures_description(summary: dict) -> str:
    """The failures table's description in plain words: how many files failed, or that
    none did (the table is then empty on purpose)."""
    ns = summary["namespace"]
    what = "dry run (would do)" if summary["dry_run"] else "ingest"
    count = len(summary["failures"])
    if not count:
        return f"no file failed in the last {what} of namespace {ns}: the table is empty"
    files = "1 file" if count == 1 else f"{count} files"
    return (f"{files} failed in the last {what} of namespace {ns}; fix or remove each one "
            "(the next run retries it)")


def doc_ids_of_table(data: Any) -> set[str]:
    """The doc_ids a stored failures table lists (its data as the API returns it: a list of
    rows, or that list as JSON text); empty for anything else."""
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except ValueError:
            return set()
    if not isinstance(data, list):
        return set()
    return {str(row["doc_id"]) for row in data if isinstance(row, dict) and row.get("doc_id")}
