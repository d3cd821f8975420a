"""The rebuild's summary artifact, as an operator reads it in the Prefect UI (#25).

What was decided first (with how many queries the gate measured and left out), then the
build settings side by side (a table: the live collection's, as it was built, against
the shadow's; changed rows marked), both
evaluations, the state check (does the shadow hold what the shares hold), the
counts of the build and of the replay (the changes synced into the shadow after its
build), and the command that undoes the swap. The report is the rebuild runner's
(:func:`kbsync.maintenance.rebuild_runner.run_rebuild`); any part it lacks is left out,
never guessed.
"""

from __future__ import annotations

from typing import Any

from kbsync.maintenance.rebuild_checks import gate_line
from tasks.run_story import escape_controls

COUNTS = ("files_seen", "added", "updated", "unchanged", "deleted", "failed")


def _cell(value: Any) -> str:
    if value is None or value == "":
        return "–"
    if isinstance(value, (list, tuple)):
        value = ", ".join(str(v) for v in value)
    return escape_controls(str(value)).replace("|", "\\|")[:200]


def _setting(value: Any) -> str:
    # An unset build setting takes its default (chunk_tokens: the model's input limit).
    return "default" if value is None else _cell(value)


def settings_table(live: dict | None, build: dict | None) -> list[str]:
    """One row per build setting: the live collection's value, the shadow's, changed or not."""
    live, build = dict(live or {}), dict(build or {})
    lines = ["| setting | live (as built) | shadow (this build) | |", "|---|---|---|---|"]
    for key in sorted(set(live) | set(build)):
        changed = "**changed**" if live.get(key) != build.get(key) else ""
        lines.append(f"| {key} | {_setting(live.get(key))} | {_setting(build.get(key))} | "
                     f"{changed} |")
    return lines


def _counts_table(title: str, per_namespace: dict | None) -> list[str]:
    if not per_namespace:
        return []
    lines = [f"## {title}", "", "| namespace | " + " | ".join(COUNTS) + " |",
             "|---|" + "---|" * len(COUNTS)]
    for ns, summary in per_namespace.items():
        lines.append(f"| {_cell(ns)} | " + " | ".join(_cell(summary.get(c)) for c in COUNTS)
                     + " |")
    return lines + [""]


def _state_lines(state: dict | None) -> list[str]:
    if not state:
        return []
    lines = ["## State check", "",
             "The shadow holds what the shares hold: " + ("**yes**" if state.get("matches")
                                                          else "**no**"), ""]
    for key, what in (("pending", "documents still to sync into the shadow"),
                      ("missing", "live documents the shadow lacks")):
        count = state.get(f"{key}_count", len(state.get(key) or []))
        if count:
            lines.append(f"- {count} {what}: {_cell(state.get(key))}"
                         f"{' …' if count > len(state.get(key) or []) else ''}")
    for item in state.get("mass_delete") or []:
        lines.append(f"- a share lost most of its documents: {_cell(item)}")
    if state.get("roots_changed"):
        lines.append(f"- roots changed during the rebuild: {_cell(state['roots_changed'])}")
    return lines + [""]


def rebuild_markdown(report: dict) -> str:
    """The rebuild's summary (see the module docstring)."""
    plan, decision = report["plan"], report["decision"]
    verdict = "swapped" if report["swapped"] else "refused (live collection kept)"
    timings = report.get("timings") or {}
    lines = [f"# kbsync rebuild of {_cell(plan['logical'])}: {verdict}", "",
             (f"- live `{plan['live']}` → shadow `{plan['shadow']}`"
              f"{' (resumed)' if plan.get('resumed') else ''}"),
             (f"- time: {report.get('duration_s')} s (build {timings.get('build_s')} s, "
              f"eval {timings.get('eval_s')} s, replay and swap {timings.get('swap_s')} s)"),
             "", "## Decision", "", *[f"- {_cell(r)}" for r in decision.get("reasons") or []],
             *[f"- {_cell(line)}" for line in [gate_line(decision)] if line],
             "", "| mode | live nDCG@10 | shadow nDCG@10 | delta | ok |",
             "|---|---|---|---|---|"]
    for mode, m in decision["modes"].items():
        lines.append(f"| {mode} | {_cell(m['live'])} | {_cell(m['shadow'])} | "
                     f"{_cell(m['delta'])} | {'yes' if m['ok'] else '**no**'} |")
    lines += ["", "## Build settings", "", *settings_table(plan.get("live_build"),
                                                            plan.get("target_build")), ""]
    lines += _state_lines(report.get("state"))
    lines += _counts_table("Shadow build", report.get("ingest"))
    lines += _counts_table("Replay (changes synced into the shadow after its build)",
                           report.get("replay"))
    if report["swapped"]:
        lines += ["## Undo", "", f"`kbsync rebuild --rollback` points `{plan['logical']}` back "
                  f"to `{plan['live']}` (kept, with the settings it was built with).", ""]
    return "\n".join(lines) + "\n"
