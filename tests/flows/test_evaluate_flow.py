"""The evaluate flow under a real Prefect server: reports, artifacts, regression gate, CLI."""

from __future__ import annotations

import argparse
import json
import shutil

import pytest
from prefect.client.orchestration import get_client

from flows.evaluate import evaluate
from kbsync.errors import UsageError
from kbsync.ingest.report import artifact_key
from kbtest import REPO, SAMPLE

QUERIES = str(REPO / "data" / "eval" / "sample_queries.jsonl")


def _artifacts(key: str, flow_run_id):
    from prefect.client.schemas.filters import (ArtifactFilter, ArtifactFilterFlowRunId,
                                                ArtifactFilterKey)

    with get_client(sync_client=True) as client:
        return client.read_artifacts(artifact_filter=ArtifactFilter(
            key=ArtifactFilterKey(any_=[key]),
            flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))


def _task_names(flow_run_id) -> set[str]:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(
            id=FlowRunFilterId(any_=[flow_run_id])))
    return {r.name for r in runs}


@pytest.fixture
def sample_kb(settings, tmp_path):
    """data/sample ingested (plain loop, hash embedder) into the test's store, then closed."""
    from kbsync.ingest.discover import parse_root
    from kbsync.ingest.runner import run_plain
    from kbsync.runtime import Runtime

    share = tmp_path / "sample"
    shutil.copytree(SAMPLE, share)
    runtime = Runtime.open(settings)
    try:
        summary = run_plain([parse_root(str(share))], runtime=runtime)
    finally:
        runtime.close()
    assert summary.failed == 0 and summary.added >= 13
    return settings


def _cli_args(*argv: str) -> argparse.Namespace:
    from kbsync.app import cli_eval
    from kbsync.app import cli_support

    # `kbsync` prints one JSON object per process and main() resets that per command;
    # these tests call the command function directly, so reset it here.
    cli_support.reset_emitted()

    parser = argparse.ArgumentParser()
    cli_eval.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["eval", *argv])


def test_evaluate_sample_then_gate_trips_on_a_drop(prefect_api, sample_kb, tmp_path, capsys):
    reports = tmp_path / "reports"
    state = evaluate(queries_file=QUERIES, k=5, modes=["dense", "hybrid"],
                     report_dir=str(reports), return_state=True)
    assert state.is_completed(), state.message
    data = state.result()
    assert data["queries"] == 31 and data["k"] == 5 and data["namespace"] == "default"
    assert list(data["modes"]) == ["dense", "hybrid"]
    for metrics in data["modes"].values():
        assert 0.5 < metrics["ndcg@10"] <= 1 and 0.5 < metrics["hit_rate"] <= 1
        assert metrics["raw_count_mean"] >= metrics["kept_count_mean"] > 0
        assert metrics["latency_ms_p95"] >= metrics["latency_ms_p50"] > 0
    assert data["warnings"] == [] and data["regression"]["passed"]
    for key in ("per_query_csv", "summary_md", "chart_png", "latest_json"):
        assert (reports / data["report"][key].split(str(reports) + "/", 1)[1]).is_file()
    run_id = state.state_details.flow_run_id
    names = _task_names(run_id)
    assert {"search-dense", "search-hybrid"} <= names  # named after the mode
    # ... and the others by their names, without Prefect's random suffix (#25)
    assert {"load-queries", "check-labels", "write-report"} <= names, names
    # The artifacts belong to the flow run (its page shows them), not to a task run,
    # and say where the reports went.
    (table,) = _artifacts(artifact_key("kbsync-eval", "default"), run_id)
    (summary,) = _artifacts(artifact_key("kbsync-eval-summary", "default"), run_id)
    run_folder = str(reports / data["report"]["run"])
    for artifact in (table, summary):
        assert artifact.flow_run_id == run_id and artifact.task_run_id is None
        assert run_folder in artifact.description
    assert '"mode": "hybrid"' in table.data
    assert "nDCG@10" in summary.data
    for key in ("per_query_csv", "chart_png", "summary_md"):
        assert f"`{data['report'][key]}`" in summary.data

    # A better earlier run (as if the last change made retrieval worse): the gate trips.
    history = reports / "history.jsonl"
    entry = json.loads(history.read_text(encoding="utf-8").splitlines()[-1])
    entry["run"], entry["modes"]["dense"]["ndcg@10"] = "better-run", 1.0
    with history.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry) + "\n")
    failed = evaluate(queries_file=QUERIES, k=5, modes=["dense"], report_dir=str(reports),
                      return_state=True)
    assert failed.is_failed() and "retrieval regression" in failed.message
    data = failed.result(raise_on_failure=False).result  # RetrievalRegression carries it
    assert data["regression"]["passed"] is False
    assert data["regression"]["baseline"] == "better-run"

    # The CLI exits 3 and prints the numbers on stderr (--accept: see tests/eval/test_report.py).
    from kbsync.app.cli_eval import run_eval

    code = run_eval(_cli_args(QUERIES, "-k", "5", "--modes", "dense", "--report-dir",
                              str(reports), "--json"),
                    sample_kb)
    out, err = capsys.readouterr()
    assert code == 3
    assert json.loads(out)["regression"]["passed"] is False
    assert "retrieval regression against run better-run" in err and "-> " in err


def test_usage_errors_fail_before_any_search(prefect_api, sample_kb, tmp_path):
    from kbsync.app.cli_eval import run_eval

    state = evaluate(queries_file=QUERIES, modes=["sparse"], report_dir=str(tmp_path),
                     return_state=True)
    assert state.is_failed()
    with pytest.raises(UsageError, match="unknown search mode"):
        state.result()
    with pytest.raises(UsageError, match="unknown search mode"):
        run_eval(_cli_args(QUERIES, "--modes", "dense,sparse"), sample_kb)
    with pytest.raises(UsageError, match="needs a chat model|KBSYNC_LLM_MODEL"):
        run_eval(_cli_args(QUERIES, "--modes", "dense+mqe2"), sample_kb)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "x", "relevant": ["sample/a.md"]}\n{"query": 1}\n',
                   encoding="utf-8")
    with pytest.raises(UsageError, match="line 2"):
        run_eval(_cli_args(str(bad)), sample_kb)
    empty_ns = evaluate(queries_file=QUERIES, namespace="nobody", report_dir=str(tmp_path),
                        return_state=True)
    with pytest.raises(UsageError, match="holds no documents"):
        empty_ns.result()
