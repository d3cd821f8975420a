"""Evaluation reports on disk, their history, and the regression gate.

Layout of a report directory::

    REPORT_DIR/
      latest.json            the latest run's JSON result (any outcome)
      history.jsonl          one line per run: metrics, gate outcome, query-set hash
      RUN/                   one folder per run (UTC time + short id)
        per_query.csv        one row per (mode, query)
        summary.md           the Markdown summary (also the Prefect artifact)
        modes.png            a chart comparing the modes
        result.json          the run's JSON result

The gate compares nDCG@10 per mode with the *baseline*: the most recent run in
``history.jsonl`` over the same namespace and the same query set (same queries
and labels) that passed its gate or was accepted. A run that trips the gate is
recorded but does not become the baseline, so a regression cannot hide by
simply running twice; ``accept=True`` records a deliberate drop as the new
baseline.

Each history line records what the run measured (``serving``: the physical collection
behind the logical name and when it became active, :func:`kbsync.catalog.active.serving`).
A baseline must have measured the collection serving now, made active at the same time:
after a swap the operator allowed (``kbsync rebuild``), a rollback or a restore, the
first evaluation has no baseline and becomes the new one (its summary says what changed
and how it compares with the last run on the former collection), so nightly evaluations
do not fail the same way forever. History lines from before this record match any
collection. A failed gate says what changed and what to do (:func:`regression_advice`).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kbsync.eval.run import METRIC_KEYS, EvalResult

log = logging.getLogger(__name__)

GATE_METRIC = "ndcg@10"


def same_serving(entry: dict, serving: dict | None) -> bool:
    """Did a history ``entry`` measure what ``serving`` names (see the module doc)? An entry
    from before ``serving`` was recorded, or no ``serving`` to compare, matches."""
    before = entry.get("serving")
    if not serving or not before:
        return True
    return (before.get("collection"), before.get("since")) == (serving.get("collection"),
                                                               serving.get("since"))


def find_baseline(report_dir: Path, *, namespace: str, queries_hash: str,
                  serving: dict | None = None) -> dict | None:
    """The latest comparable run that passed (or was accepted), from ``history.jsonl``.

    ``serving``: only runs that measured this (:func:`same_serving`); ``None``: any.
    Unreadable history lines are logged and ignored: a damaged line must not
    stop an evaluation, and the gate then compares with an older run.
    """
    path = report_dir / "history.jsonl"
    if not path.exists():
        return None
    baseline = None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            log.warning("%s line %d is not valid JSON; ignored", path, number)
            continue
        if (entry.get("namespace") == namespace and entry.get("queries_hash") == queries_hash
                and (entry.get("passed") or entry.get("accepted"))
                and same_serving(entry, serving)):
            baseline = entry
    return baseline


def gate(result: EvalResult, baseline: dict | None, *, margin: float,
         accept: bool = False) -> dict[str, Any]:
    """Compare nDCG@10 per mode with the baseline.

    A mode fails when ``baseline - current > margin`` (values as rounded in the
    reports, 4 decimals). Modes absent from the baseline are not compared.

    Returns:
        ``{passed, margin, metric, baseline, baseline_created_at, accepted, compared[]}``;
        ``compared`` holds ``{mode, previous, current, delta, dropped}``.
    """
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin}")
    compared = []
    if baseline is not None:
        for mode, metrics in result.modes.items():
            before = (baseline.get("modes") or {}).get(mode, {}).get(GATE_METRIC)
            now = metrics.get(GATE_METRIC)
            if before is None or now is None:
                continue
            delta = round(now - before, 4)
            compared.append({"mode": mode, "previous": before, "current": now, "delta": delta,
                             "dropped": -delta > margin + 1e-9})
    dropped = any(c["dropped"] for c in compared)
    return {"passed": not dropped, "margin": margin, "metric": GATE_METRIC,
            "baseline": baseline.get("run") if baseline else None,
            "baseline_created_at": baseline.get("created_at") if baseline else None,
            "accepted": bool(accept and dropped), "compared": compared}


def gate_message(regression: dict) -> str:
    """One line per dropped mode: ``hybrid: nDCG@10 0.8123 -> 0.7510 (-0.0613 > 0.02)``."""
    return "\n".join(
        f"{c['mode']}: {regression['metric']} {c['previous']:.4f} -> {c['current']:.4f} "
        f"({c['delta']:+.4f}, allowed drop {regression['margin']})"
        for c in regression.get("compared", []) if c["dropped"])


def regression_advice(regression: dict) -> str:
    """What changed since the baseline, and what to do, for a tripped gate (one line: the
    flow logs it at WARNING; the summary shows it too)."""
    serving = regression.get("serving") or {}
    since, created = serving.get("since"), regression.get("baseline_created_at")
    collection = serving.get("collection")
    # A baseline that recorded what it measured measured this (find_baseline); one from
    # before that record is told apart by when the collection became active.
    if not regression.get("baseline_serving") and since and created and str(since) > str(created):
        changed = (f"{serving.get('logical')} serves from {collection} since {since} (a rebuild "
                   f"swap, rollback or restore after the baseline run"
                   f"{'; before: ' + serving['previous'] if serving.get('previous') else ''})")
    elif collection:
        changed = (f"the active collection {collection} is the one the baseline run measured: "
                   "the documents synced since, the embedding service or the labels changed")
    else:
        changed = "the documents synced since, the embedding service or the labels changed"
    steps = ["if the drop is expected, run evaluate again with accept_regression true (CLI: "
             "kbsync eval --accept) to record it as the new baseline"]
    if serving.get("previous"):
        steps.append(f"if the last rebuild caused it, serve {serving['previous']} again: the "
                     "rollback deployment with confirm true (CLI: kbsync rebuild --rollback)")
    else:
        steps.append("else find what the syncs since changed (the per-query drops in the "
                     "summary)")
    return (f"what changed since baseline run {regression.get('baseline')} ({created}): "
            f"{changed}. Next: " + "; ".join(steps) + ".")


def write_report(result: EvalResult, report_dir: str | Path, *, margin: float = 0.02,
                 accept: bool = False, serving: dict | None = None) -> EvalResult:
    """Run the gate, write the run's files, append history, replace ``latest.json``.

    ``serving``: what the run measured (:func:`kbsync.catalog.active.serving`), recorded
    in history and matched by the baseline (see the module doc); ``None``: any baseline.

    Fills ``result.report`` (paths) and ``result.regression`` and returns ``result``.
    The run folder is written completely before ``latest.json`` and the history
    line, so a crash never leaves history pointing at missing files.
    """
    root = Path(report_dir)
    root.mkdir(parents=True, exist_ok=True)
    baseline = find_baseline(root, namespace=result.namespace, queries_hash=result.queries_hash,
                             serving=serving)
    result.regression = gate(result, baseline, margin=margin, accept=accept)
    if serving:
        result.regression["serving"] = serving
        result.regression["baseline_serving"] = (baseline or {}).get("serving")
        former = (find_baseline(root, namespace=result.namespace,
                                queries_hash=result.queries_hash) if baseline is None else None)
        if former is not None:  # the last run on the collection served before
            result.regression["former"] = gate(result, former, margin=margin)
            result.regression["former"]["serving"] = former.get("serving") or {}
    now = datetime.now(timezone.utc)
    run = f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"
    folder = root / run
    folder.mkdir()
    result.report = {"dir": str(root), "run": run, "created_at": now.isoformat(timespec="seconds"),
                     "per_query_csv": str(folder / "per_query.csv"),
                     "summary_md": str(folder / "summary.md"),
                     "chart_png": str(folder / "modes.png"),
                     "result_json": str(folder / "result.json"),
                     "latest_json": str(root / "latest.json"),
                     "history": str(root / "history.jsonl")}
    write_csv(result, folder / "per_query.csv")
    (folder / "summary.md").write_text(summary_markdown(result), encoding="utf-8")
    write_chart(result, folder / "modes.png")
    payload = json.dumps(result.to_dict(), ensure_ascii=False, indent=2) + "\n"
    (folder / "result.json").write_text(payload, encoding="utf-8")
    _replace(root / "latest.json", payload)
    entry = {"run": run, "created_at": result.report["created_at"],
             "namespace": result.namespace, "k": result.k, "queries": result.queries,
             "queries_hash": result.queries_hash, "embedding": result.embedding,
             "modes": result.modes, "passed": result.regression["passed"],
             "accepted": result.regression["accepted"]}
    if serving:
        entry["serving"] = serving
    with open(root / "history.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry, ensure_ascii=False) + "\n")
    return result


def _replace(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so readers never see half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_csv(result: EvalResult, path: Path) -> None:
    """The per-query rows (UTF-8; lists joined with ``|``)."""
    import pandas as pd

    frame = pd.DataFrame([o.to_row() for o in result.outcomes])
    frame = frame.rename(columns={"hit": "hit@k", "mrr": "mrr@k", "ndcg10": "ndcg@10",
                                  "recall": "recall@k"})
    frame.to_csv(path, index=False, encoding="utf-8")


def table_rows(result: EvalResult) -> list[dict[str, Any]]:
    """One row per mode: the metrics and the change against the baseline (table artifact)."""
    deltas = {c["mode"]: c["delta"] for c in result.regression.get("compared", [])}
    return [{"mode": mode, **{key: metrics[key] for key in (
        *METRIC_KEYS, "raw_count_mean", "kept_count_mean", "latency_ms_p50", "latency_ms_p95")},
        "ndcg@10_delta": deltas.get(mode)} for mode, metrics in result.modes.items()]


def summary_markdown(result: EvalResult) -> str:
    """The run as Markdown: metrics per mode, the gate, then each mode's missed queries."""
    emb = result.embedding
    reg = result.regression
    lines = [f"# kbsync eval: {result.namespace}", "",
             f"{result.queries} queries, k = {result.k}, embedding "
             f"`{emb.get('provider', '?')}/{emb.get('model', '?')}`"
             f" (dim {emb.get('dimension', '?')}), run `{result.report.get('run', '')}`", "",
             "| mode | hit@k | MRR@k | nDCG@10 | recall@k | raw mean | kept mean "
             "| p50 ms | p95 ms | nDCG@10 change |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in table_rows(result):
        cells = [row["mode"], *(_fmt(row[key]) for key in (
            *METRIC_KEYS, "raw_count_mean", "kept_count_mean", "latency_ms_p50",
            "latency_ms_p95")), _fmt(row["ndcg@10_delta"], signed=True)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Regression gate", ""]
    serving = reg.get("serving") or {}
    if serving:
        lines += [f"Measured collection `{serving.get('collection')}` (serving "
                  f"`{serving.get('logical')}`"
                  f"{', active since ' + serving['since'] if serving.get('since') else ''}"
                  f"{', previous `' + serving['previous'] + '`' if serving.get('previous') else ''}"
                  ").", ""]
    former = reg.get("former")
    if reg.get("baseline") is None and former:
        was = (former.get("serving") or {}).get("collection", "?")
        lines.append(f"The active collection changed since the last comparable run "
                     f"`{former['baseline']}` (it measured `{was}`; now `{serving.get('collection')}`"
                     f"{', active since ' + serving['since'] if serving.get('since') else ''}): "
                     "this run becomes the new baseline, so the next runs compare with it.")
        dropped = gate_message(former)
        if dropped:
            lines += ["", f"Against `{former['baseline']}` on `{was}` (for information, not "
                          "gated):", "", "```", dropped, "```"]
    elif reg.get("baseline") is None:
        lines.append("No earlier comparable run (same namespace and query set): nothing to "
                     "compare; this run becomes the baseline.")
    elif reg.get("passed"):
        lines.append(f"Passed: no mode lost more than {reg['margin']} nDCG@10 against run "
                     f"`{reg['baseline']}`.")
    else:
        verdict = "accepted as the new baseline" if reg.get("accepted") else "FAILED"
        lines.append(f"{verdict}: against run `{reg['baseline']}`:")
        lines += ["", "```", gate_message(reg), "```"]
        if not reg.get("accepted"):
            lines += ["", "## What changed, what to do", "", regression_advice(reg)]
    if result.warnings:
        lines += ["", "## Warnings", ""] + [f"- {_cell(w)}" for w in result.warnings[:50]]
    for mode in result.modes:
        missed = [o for o in result.outcomes if o.mode == mode and o.hit == 0.0]
        if missed:
            lines += ["", f"## Missed in top {result.k}: {mode} ({len(missed)})", "",
                      "| line | query | relevant | top documents |", "|---|---|---|---|"]
            lines += [f"| {o.line} | {_cell(o.query)} | {_cell(', '.join(o.relevant))} "
                      f"| {_cell(', '.join(o.top_docs[:3]))} |" for o in missed[:30]]
    return "\n".join(lines) + "\n"


def _fmt(value: Any, *, signed: bool = False) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:+.4f}" if signed else f"{value:.4g}"
    return str(value)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")[:200]


def write_chart(result: EvalResult, path: Path) -> None:
    """Grouped bars: quality metrics per mode (left), latency p50/p95 per mode (right).

    Uses matplotlib's object API with the Agg canvas, never ``pyplot``: no
    global state, no display needed, safe in worker threads.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    modes = list(result.modes)
    fig = Figure(figsize=(10, 4), dpi=100)
    FigureCanvasAgg(fig)
    quality, latency = fig.subplots(1, 2, gridspec_kw={"width_ratios": [2, 1]})
    width = 0.8 / max(len(modes), 1)
    for i, mode in enumerate(modes):
        values = [result.modes[mode].get(key) or 0.0 for key in METRIC_KEYS]
        xs = [x + i * width for x in range(len(METRIC_KEYS))]
        bars = quality.bar(xs, values, width, label=mode)
        quality.bar_label(bars, fmt="%.2f", fontsize=7)
        lat = [result.modes[mode]["latency_ms_p50"], result.modes[mode]["latency_ms_p95"]]
        latency.bar([x + i * width for x in range(2)], lat, width, label=mode)
    offset = width * (len(modes) - 1) / 2
    quality.set_xticks([x + offset for x in range(len(METRIC_KEYS))],
                       [key.replace("@k", f"@{result.k}") for key in METRIC_KEYS])
    quality.set_ylim(0, 1.1)
    quality.set_title(f"{result.namespace}: {result.queries} queries")
    quality.legend(fontsize=8)
    latency.set_xticks([offset, 1 + offset], ["p50", "p95"])
    latency.set_ylabel("ms")
    latency.set_title("search latency")
    fig.tight_layout()
    fig.savefig(path, format="png")
