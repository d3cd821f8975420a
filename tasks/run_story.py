"""What a run's log and summary say to the operator who opens it in the Prefect UI.

- :func:`log_failures`: one WARNING line per failed file (the UI's "Warning and
  above" filter shows exactly these on a Failed run), at most :data:`LOGGED_FAILURES`,
  then one line saying how many more and which table lists them all.
- :func:`refusal_markdown`: the summary artifact of a run that ended on a
  :class:`~kbsync.errors.KbsyncError` (a refusal or an outage) instead of a summary.
- :func:`count_line`: the run's closing INFO line, in "would" words for a dry run.
- :func:`run_outcome`: the outcome a summary's title and ``outcome`` row show (``ok``,
  ``failed: N new failed files``, ``completed: N known failed files``, and for a stopped
  run ``stopped: KIND``), so the summary key's history tells the runs apart.

Everything a file or share put in these lines (doc_ids, messages) has its control
characters escaped: a name with a newline or an ANSI escape cannot forge a log line.
"""

from __future__ import annotations

import logging
import unicodedata

from kbsync.ingest.report import artifact_key, short_message, summary_markdown

LOGGED_FAILURES = 20
"""Failed files named one per line in the log; the failures table lists every one."""


def escape_controls(text: str) -> str:
    """``text`` with every control or format character (C0, C1, DEL, bidi marks) as ``\\xNN``
    or ``\\uNNNN``: one printable line whatever a file name held."""
    out = []
    for char in str(text):
        if unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp"):
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(char)
    return "".join(out)


def failures_key(summary: dict) -> str:
    """The key of the failures table this run's summary was written beside."""
    prefix = "kbsync-dry-run" if summary.get("dry_run") else "kbsync-ingest"
    return artifact_key(f"{prefix}-failures", summary.get("namespace", "default"))


def failure_lines(summary: dict, limit: int = LOGGED_FAILURES) -> list[str]:
    """The WARNING lines of a summary's failed files: ``failed DOC_ID: KIND: MESSAGE``,
    at most ``limit``, then ``... and N more failed files: see the table artifact KEY``."""
    failures = summary.get("failures") or []
    lines = [f"failed {escape_controls(f.get('doc_id') or f.get('path') or '?')}: "
             f"{escape_controls(f.get('error', '?'))}: {escape_controls(short_message(f))}"
             for f in failures[:limit]]
    if len(failures) > limit:
        lines.append(f"... and {len(failures) - limit} more failed files: see the table "
                     f"artifact {failures_key(summary)} (every failed file, with its path)")
    return lines


def log_failures(logger: logging.Logger | logging.LoggerAdapter, summary: dict,
                 known: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    """Log :func:`failure_lines` of ``summary`` at WARNING, one record per line; a file in
    ``known`` (it failed in the last run too) says so."""
    failures = summary.get("failures") or []
    for index, line in enumerate(failure_lines(summary)):
        if index < len(failures) and index < LOGGED_FAILURES and \
                failures[index].get("doc_id") in known:
            line += " (known: it failed in the last run too)"
        logger.warning("%s", line)


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


def describe_embedder(settings) -> str:
    """``provider/model (N dims)`` of the run's embedder (the chosen model's, after a
    choice), as the run's log and summary name it; the configured names when the runtime
    cannot say (no probe is worth failing a finished run for)."""
    from tasks.resources import runtime_for

    try:
        service = runtime_for(settings).service
        return f"{service.provider}/{service.model} ({service.dimension} dims)"
    except Exception:  # noqa: BLE001 - a description only
        dims = f" ({settings.embed_dimensions} dims)" if settings.embed_dimensions else ""
        return f"{settings.embed_provider.value}/{settings.embed_model_name()}{dims}"


def count_line(summary: dict) -> str:
    """``ingest NS: added 1, ...`` or, for a dry run, ``dry run NS (nothing written): would
    add 15, would update 0, ...``."""
    names = ("add", "update", "keep unchanged", "delete")
    values = (summary["added"], summary["updated"], summary["unchanged"], summary["deleted"])
    ns = escape_controls(summary["namespace"])
    if summary.get("dry_run"):
        said = ", ".join(f"would {n} {v}" for n, v in zip(names, values))
        return f"dry run {ns} (nothing written): {said}, failed {summary['failed']}"
    said = ", ".join(f"{past} {v}" for past, v in
                     zip(("added", "updated", "unchanged", "deleted"), values))
    apart = (f", not attempted {summary['not_attempted']}" if summary.get("not_attempted")
             else "")
    if summary.get("permissions_updated"):
        apart += f", permissions updated {summary['permissions_updated']}"
    return f"ingest {ns}: {said}, failed {summary['failed']}{apart}"


def refusal_markdown(kind: str, message: str, namespace: str, dry_run: bool,
                     counts: dict | None) -> str:
    """The summary of a run that a refusal or an outage ended: what stopped it, in one
    line, where to read what to do, and the counts it reached (when it reached any)."""
    title = "kbsync dry run" if dry_run else "kbsync ingest"
    lines = [f"# {title}: {namespace} (stopped: {kind})", "",
             "| outcome | error |", "|---|---|", f"| stopped: {kind} | {_one_line(message)} |",
             "",
             "Nothing after this point ran. What to do: docs/OPERATIONS.md, section "
             "\"When a run failed\", the row for this error.", ""]
    if counts and "namespace" in counts and any(
            counts.get(f) for f in ("files_seen", "deleted", "failed")):  # all zero: noise
        lines += ["## What it did before it stopped", "",
                  summary_markdown(counts).split("\n", 2)[2]]
    return "\n".join(lines) + "\n"


def _one_line(text: str) -> str:
    return escape_controls(" ".join(str(text).split())).replace("|", "\\|")[:1000]
