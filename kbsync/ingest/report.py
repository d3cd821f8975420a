"""Human-readable renderings of run summaries (Markdown for artifacts)."""

from __future__ import annotations

import logging
import re
import unicodedata

SUMMARY_FIELDS = ("files_seen", "added", "updated", "unchanged", "deleted", "failed", "ignored",
                  "chunks_raw", "chunks_kept", "embeddings_computed", "embeddings_cached",
                  "embeddings_failed", "duration_s")
EXTRA_FIELDS = ("repaired", "kept_unreadable", "kept_excluded", "not_attempted",
                "permissions_updated", "permissions_unreadable", "owner_only")
"""Shown only when not 0 (documents rebuilt because the store had lost their points;
documents that could not be read and were kept; documents full mode kept because the
run's --include/--exclude left them out; files a stopped run never began; documents whose
points took new permissions, nothing converted or embedded; documents whose permissions
could not be read, root only; documents only their owner may read: docs/permissions.md)."""


def shown_fields(summary: dict) -> list[str]:
    """The metrics a readable summary shows: the stable ones, then non-zero extras."""
    return list(SUMMARY_FIELDS) + [f for f in EXTRA_FIELDS if summary.get(f)]


def ignored_line(summary: dict) -> str:
    """``ignored: 3 .rtf, 2 (no extension)`` (most first), or "" when nothing was ignored."""
    kinds = sorted(summary.get("ignored_by_kind", {}).items(), key=lambda kv: (-kv[1], kv[0]))
    return f"ignored: {', '.join(f'{n} {kind}' for kind, n in kinds)}" if kinds else ""


def artifact_key(prefix: str, namespace: str) -> str:
    """A Prefect artifact key (lowercase letters, digits, dashes) stable per namespace."""
    slug = re.sub(r"[^a-z0-9-]+", "-", namespace.lower()).strip("-") or "default"
    return f"{prefix}-{slug}"[:120]


NEXT_STEP = ("What to do: fix or remove each failed file, or leave it out with `exclude`; "
             "the rest of the run was stored, and the next run retries exactly the failed "
             "files, but for one that failed for its own content and is unchanged since "
             "(`failed_remembered`; `kbsync ingest --force` retries it). "
             "`kbsync ingest --json` names each file's reason (`failures[].error` and "
             "`message`); docs/OPERATIONS.md, section \"When a run failed\", says what each "
             "kind means.")
"""The next step a summary with failed files ends its failures section with."""


def summary_markdown(summary: dict, *, outcome: str | None = None,
                     embedder: str | None = None) -> str:
    """The ingest summary as a Markdown table, failures listed below it.

    Shows the chunker's raw/kept figures so the ingest and search sides can be
    read together. ``outcome`` (the run's outcome in words: ``ok``, ``failed: 1 new failed
    file``, ...) heads the title and the table, so the history of the summary's key tells
    the runs apart; ``embedder`` (``provider/model (N dims)``) names the embedding model.
    """
    state = outcome or ("with failures" if summary["failed"] else "ok")
    title = "kbsync dry run (would do, nothing written)" if summary["dry_run"] \
        else "kbsync ingest"
    lines = [f"# {title}: {summary['namespace']} ({state})", "",
             f"run `{summary['run_id']}`, mode `{summary['mode']}`, "
             f"dry run: {summary['dry_run']}, roots: {', '.join(summary.get('roots', []))}", "",
             "| metric | value |", "|---|---|"]
    if outcome:
        lines.append(f"| outcome | {_cell(outcome)} |")
    if embedder:
        lines.append(f"| embedding model | {_cell(embedder)} |")
    lines += [f"| {name} | {summary[name]} |" for name in shown_fields(summary)]
    if summary["failures"]:
        prefix = "kbsync-dry-run" if summary["dry_run"] else "kbsync-ingest"
        key = artifact_key(f"{prefix}-failures", summary["namespace"])
        # A link the Prefect UI resolves on its own origin (its route /artifacts/key/KEY).
        lines += ["", "## Failures", "", NEXT_STEP, "", f"All of them, with paths and whole "
                  f"messages: the table artifact [`{key}`](/artifacts/key/{key}).",
                  "", "| doc_id | error | message |", "|---|---|---|"]
        lines += [f"| {_cell(f['doc_id'])} | {f['error']} | {_cell(short_message(f))} |"
                  for f in summary["failures"][:200]]
    if summary.get("warnings"):
        lines += ["", "## Warnings", ""] + [f"- {_cell(w)}" for w in summary["warnings"][:100]]
    return "\n".join(lines) + "\n"


def short_message(failure: dict, limit: int | None = 160) -> str:
    """A failure's message without the file's path (its doc_id says which file), cut to
    ``limit`` characters (``None``: whole, as the failures table shows it)."""
    message = str(failure.get("message", ""))
    # The longer first: the doc_id is often the path's tail, and cutting it first would
    # leave the path's head behind ("/tmp/share/: not a readable PDF").
    names = sorted({str(failure.get("path") or ""), str(failure.get("doc_id") or "")} - {""},
                   key=len, reverse=True)
    for path in names:
        message = message.replace(f"{path}: ", "").replace(path, "<file>")
    message = " ".join(message.split())
    return message if limit is None or len(message) <= limit else message[:limit - 1] + "…"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")[:300]


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
    remembered = (f" ({summary['failed_remembered']} unchanged since they failed: not "
                  "converted again; `kbsync ingest --force` retries them)"
                  if summary.get("failed_remembered") else "")
    return f"ingest {ns}: {said}, failed {summary['failed']}{remembered}{apart}"
