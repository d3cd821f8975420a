"""What a run's log and summary say to the operator who opens it in the Prefect UI.

The log lines (:func:`log_failures`, :func:`count_line`, :func:`escape_controls`) live in
:mod:`kbsync.ingest.report`, so a plain run (no Prefect API) logs the very same lines;
they are re-exported here.

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

from kbsync.ingest.report import (LOGGED_FAILURES, count_line, escape_controls,  # noqa: F401
                                  failure_lines, failures_key, log_failures,
                                  summary_markdown)
from kbsync.ingest.run_record import run_outcome  # noqa: F401


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
