"""The evaluation's figures as Markdown a browser renders inline (the Prefect UI's artifacts).

The chart PNG lies on the worker's disk, which an operator cannot open from the UI
(an image artifact needs a URL). These tables say the same from the files the
report already keeps:

- :func:`trend_markdown`: nDCG@10 per mode over the last comparable runs
  (``history.jsonl``: same namespace, same query set), newest last;
- :func:`drops_markdown`: the queries whose nDCG@10 fell most against the
  baseline run (its ``per_query.csv`` beside this run's outcomes).

Both read only; a missing or damaged file gives a line saying so, never an error
(the evaluation's own result stands without them).
"""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path
from typing import Any

from kbsync.eval.report import GATE_METRIC

log = logging.getLogger(__name__)

TREND_RUNS = 10
"""Runs the trend table shows (the newest ones)."""
DROPS = 10
"""Queries the drops table shows (the biggest drops)."""


def _history(result: Any) -> list[dict]:
    path = Path(result.report.get("history", ""))
    if not path.is_file():
        return []
    entries = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            log.warning("%s line %d is not JSON: left out of the trend", path, number)
            continue
        if (entry.get("namespace") == result.namespace
                and entry.get("queries_hash") == result.queries_hash):
            entries.append(entry)
    return entries


def _value(entry: dict, mode: str) -> float | None:
    return ((entry.get("modes") or {}).get(mode) or {}).get(GATE_METRIC)


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _change(now: float | None, before: float | None) -> str:
    if now is None or before is None:
        return ""
    return f" ({now - before:+.3f})"


def trend_markdown(result: Any, runs: int = TREND_RUNS) -> str:
    """``## nDCG@10 trend``: one row per run (newest last), one column per mode of this run,
    each value with its change against the run before; the gate's verdict per run."""
    entries = _history(result)[-runs:]
    modes = list(result.modes)
    lines = [f"## {GATE_METRIC} trend, last {len(entries)} runs (same namespace and queries)",
             ""]
    if not entries:
        return "\n".join(lines + ["No history yet: this run is the first.", ""])
    lines += ["| run | at | " + " | ".join(modes) + " | gate |",
              "|---|---|" + "---|" * len(modes) + "---|"]
    previous: dict | None = None
    for entry in entries:
        cells = [_fmt(_value(entry, m)) + (_change(_value(entry, m), _value(previous, m))
                                           if previous else "") for m in modes]
        verdict = "accepted" if entry.get("accepted") else (
            "passed" if entry.get("passed") else "FAILED")
        lines.append(f"| `{entry.get('run', '?')}` | {entry.get('created_at', '?')} | "
                     + " | ".join(cells) + f" | {verdict} |")
        previous = entry
    return "\n".join(lines) + "\n"


def _baseline_rows(result: Any) -> dict[tuple[str, str], float] | None:
    baseline = (result.regression or {}).get("baseline")
    if not baseline:
        return None
    path = Path(result.report.get("dir", "")) / str(baseline) / "per_query.csv"
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            rows = list(csv.DictReader(handle))
    except OSError as exc:
        log.warning("baseline per-query file %s cannot be read (%s): no drops table", path, exc)
        return None
    out = {}
    for row in rows:
        try:
            out[(row["mode"], row["query"])] = float(row["ndcg@10"])
        except (KeyError, ValueError):
            continue  # an unlabelled query (empty value) is not compared
    return out


def drops_markdown(result: Any, limit: int = DROPS) -> str:
    """``## Biggest drops``: the queries whose nDCG@10 fell most against the baseline run."""
    title = f"## Biggest per-query drops of {GATE_METRIC} against the baseline"
    before = _baseline_rows(result)
    if before is None:
        return f"{title}\n\nNo baseline run to compare with.\n"
    drops = []
    for outcome in result.outcomes:
        old = before.get((outcome.mode, outcome.query))
        if old is None or outcome.ndcg10 is None or outcome.ndcg10 >= old:
            continue
        drops.append((outcome.ndcg10 - old, outcome, old))
    drops.sort(key=lambda d: (d[0], d[1].mode, d[1].line))
    if not drops:
        return f"{title}\n\nNo query dropped.\n"
    lines = [title, "", f"{len(drops)} queries dropped; the {min(limit, len(drops))} biggest:",
             "", "| mode | line | query | baseline | now | change | first relevant rank |",
             "|---|---|---|---|---|---|---|"]
    for delta, outcome, old in drops[:limit]:
        query = " ".join(outcome.query.split()).replace("|", "\\|")[:120]
        rank = outcome.first_relevant_rank or "not found"
        lines.append(f"| {outcome.mode} | {outcome.line} | {query} | {old:.3f} | "
                     f"{outcome.ndcg10:.3f} | {delta:+.3f} | {rank} |")
    return "\n".join(lines) + "\n"
