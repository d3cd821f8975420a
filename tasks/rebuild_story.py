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
from kbsync.maintenance.rebuild_runner import DEFAULT_MAX_DROP
from tasks.run_story import escape_controls

COUNTS = ("files_seen", "added", "updated", "unchanged", "deleted", "failed")


def _cell(value: Any) -> str:
    if value is None or value == "":
        return "–"
    if isinstance(value, (list, tuple)):
        value = ", ".join(str(v) for v in value)
    return escape_controls(str(value)).replace("|", "\\|")[:200]


def _setting(value: Any, resolved: Any = None) -> str:
    # An unset build setting takes its default (chunk_tokens: the model's input limit);
    # where the evaluation measured what the default came to, it is shown.
    if value is None:
        return "default" if resolved is None else f"default ({_cell(resolved)})"
    return _cell(value)


def settings_table(live: dict | None, build: dict | None, *,
                   resolved: dict[str, dict] | None = None) -> list[str]:
    """One row per build setting: the live collection's value, the shadow's, changed or not.

    ``resolved``: per side (``live``, ``shadow``) what an unset setting came to, as measured
    (the embedding's dimension); values are compared resolved, so ``384`` against an unset
    dimension whose model gives 384 is not a change.
    """
    live, build = dict(live or {}), dict(build or {})
    known = {"live": dict((resolved or {}).get("live") or {}),
             "shadow": dict((resolved or {}).get("shadow") or {})}
    lines = ["| setting | live (as built) | shadow (this build) | |", "|---|---|---|---|"]
    for key in sorted(set(live) | set(build)):
        before, after = live.get(key), build.get(key)
        before_is = known["live"].get(key) if before is None else before
        after_is = known["shadow"].get(key) if after is None else after
        changed = "**changed**" if before_is != after_is else ""
        lines.append(f"| {key} | {_setting(before, known['live'].get(key))} | "
                     f"{_setting(after, known['shadow'].get(key))} | {changed} |")
    return lines


def _measured(evaluation: dict | None) -> dict[str, Any]:
    """What an evaluation measured of a collection's build: its embedding's dimension."""
    dimension = ((evaluation or {}).get("embedding") or {}).get("dimension")
    return {"embed_dimensions": dimension} if dimension else {}


def max_drop_line(decision: dict) -> str | None:
    """The gate's ``max_drop``, said to be overridden when it is not the default."""
    max_drop = decision.get("max_drop")
    if max_drop is None:
        return None
    if abs(max_drop - DEFAULT_MAX_DROP) < 1e-12:
        return f"max_drop {max_drop:g} (the default)"
    return (f"max_drop **{max_drop:g}, overridden** (default {DEFAULT_MAX_DROP:g}): the "
            f"gate allowed a drop of up to {max_drop:g} nDCG@10")


def undo_lines(report: dict) -> list[str]:
    """How to undo a swap: what a rollback serves again (the collection the swap replaced)."""
    plan, pointer = report["plan"], report.get("pointer") or {}
    previous = pointer.get("previous", plan.get("live"))
    how = ("`kbsync rebuild --rollback`, or the `rollback/rollback` deployment with "
           "`confirm` true,")
    if not previous:
        return ["## Undo", "", f"There is no previous collection of `{plan['logical']}` to "
                "roll back to.", ""]
    if previous == plan["logical"]:
        what = (f"makes `{plan['logical']}` serve its original build again (collection "
                f"`{previous}`, kept with the settings it was built with)")
    else:
        what = (f"makes `{plan['logical']}` serve `{previous}` again (kept, with the settings "
                "it was built with)")
    return ["## Undo", "", f"{how} {what}.", ""]


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
             *[f"- {line}" for line in [max_drop_line(decision)] if line],
             "", "| mode | live nDCG@10 | shadow nDCG@10 | delta | ok |",
             "|---|---|---|---|---|"]
    for mode, m in decision["modes"].items():
        lines.append(f"| {mode} | {_cell(m['live'])} | {_cell(m['shadow'])} | "
                     f"{_cell(m['delta'])} | {'yes' if m['ok'] else '**no**'} |")
    measured = {"live": _measured(report.get("live")), "shadow": _measured(report.get("shadow"))}
    lines += ["", "## Build settings", "", *settings_table(plan.get("live_build"),
                                                            plan.get("target_build"),
                                                            resolved=measured), ""]
    lines += _state_lines(report.get("state"))
    lines += _counts_table("Shadow build", report.get("ingest"))
    lines += _counts_table("Replay (changes synced into the shadow after its build)",
                           report.get("replay"))
    if report["swapped"]:
        lines += ["## Evaluations", "", f"The next `evaluate` run measures `{plan['shadow']}` and "
                  "becomes the regression gate's new baseline (runs on the replaced collection "
                  "are no longer compared), so nightly evaluations do not fail on the swap.", ""]
        lines += undo_lines(report)
    return "\n".join(lines) + "\n"
