"""The evaluation's figures in the UI, as Markdown (#25): the trend of nDCG@10 per mode over
the last runs and the queries that dropped most against the baseline, in the summary
artifact of the evaluate flow run (the chart PNG lies on the worker's disk)."""

from __future__ import annotations

import csv
import json
import shutil

from prefect.artifacts import Artifact

from flows.evaluate import evaluate
from kbsync.ingest.report import artifact_key
from test_evaluate_flow import QUERIES, sample_kb  # noqa: F401 - the fixture


def _worse_baseline(reports, first_run: str) -> None:
    """A baseline run where every query scored 1.0 (as if the last change made it worse)."""
    shutil.copytree(reports / first_run, reports / "better-run")
    path = reports / "better-run" / "per_query.csv"
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        row["ndcg@10"] = "1.0"
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    history = reports / "history.jsonl"
    entry = json.loads(history.read_text(encoding="utf-8").splitlines()[-1])
    entry["run"], entry["modes"]["hybrid"]["ndcg@10"] = "better-run", 1.0
    with history.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry) + "\n")


def test_the_summary_shows_the_trend_and_the_biggest_drops(prefect_api, sample_kb, tmp_path):
    reports = tmp_path / "reports"
    first = evaluate(queries_file=QUERIES, k=5, report_dir=str(reports), return_state=True)
    assert first.is_completed()
    data = first.result()
    assert list(data["modes"]) == ["hybrid"]  # the default: the mode `kbsync search` uses
    summary = Artifact.get(artifact_key("kbsync-eval-summary", "default")).data
    assert "## ndcg@10 trend, last 1 runs" in summary and "| run | at | hybrid | gate |" in summary
    assert "No baseline run to compare with." in summary

    _worse_baseline(reports, data["report"]["run"])
    failed = evaluate(queries_file=QUERIES, k=5, report_dir=str(reports), return_state=True)
    assert failed.is_failed() and "retrieval regression" in failed.message
    summary = Artifact.get(artifact_key("kbsync-eval-summary", "default")).data
    assert "## ndcg@10 trend, last 3 runs" in summary, summary
    trend = [line for line in summary.splitlines() if line.startswith("| `")]
    assert trend[1].startswith("| `better-run`") and "1.000 (+" in trend[1], trend
    assert trend[2].endswith("| FAILED |") and "(-" in trend[2], trend
    assert "## Biggest per-query drops of ndcg@10 against the baseline" in summary
    after = summary.split("## Biggest per-query drops", 1)[1].split("\n## ", 1)[0]
    drops = [line for line in after.splitlines() if line.startswith("| hybrid |")]
    assert drops and all("| 1.000 |" in line for line in drops), drops
    assert "chart PNG (on the worker's disk" in summary
    # What changed and what to do: in the summary, and one WARNING line in the run's log, so
    # the UI's "Warning and above" view shows it (#41).
    assert "## What changed, what to do" in summary and "accept_regression true" in summary
    from test_run_story import _run_logs

    warnings = [m for level, m in _run_logs(failed.state_details.flow_run_id,
                                            "accept_regression") if level >= 30]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("retrieval regression: hybrid: ndcg@10 1.0000 -> "), warnings
    assert "what changed since baseline run better-run" in warnings[0]
    assert "Next: if the drop is expected, run evaluate again with accept_regression true" \
        in warnings[0]
