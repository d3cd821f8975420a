"""The one evaluate sequence (kbsync.eval.sequence): the order of its steps, usage errors
before any step, and the release after searching even when a search fails. The flow runs
the same sequence on Prefect tasks (tests/flows/test_evaluate_flow.py)."""

from __future__ import annotations

from typing import Any

import pytest

from kbsync.errors import UsageError
from kbsync.eval.queries import EvalQuery
from kbsync.eval.run import EvalResult, ModeSpec, QueryOutcome
from kbsync.eval.sequence import EvalRequest, run_evaluation

QUERIES = [EvalQuery(line=1, query="keys", relevant=("docs/keys.md",)),
           EvalQuery(line=2, query="nothing", relevant=())]


class Recording:
    """An executor that records each step and answers with fixed values."""

    def __init__(self, *, fail_search: bool = False) -> None:
        self.calls: list[str] = []
        self.fail_search = fail_search

    def chat_model(self):
        self.calls.append("chat_model")
        return object()

    def load_queries(self, queries_file: str) -> list[EvalQuery]:
        self.calls.append(f"load_queries {queries_file}")
        return QUERIES

    def check_labels(self, queries, *, namespace: str) -> list[str]:
        self.calls.append(f"check_labels {namespace}")
        return []

    def search_mode(self, queries, spec: ModeSpec, *, namespace: str, k: int,
                    filters: dict[str, Any]) -> list[QueryOutcome]:
        self.calls.append(f"search_mode {spec.name} k={k} types={filters['types']}")
        if self.fail_search:
            raise RuntimeError("store gone")
        return [QueryOutcome(mode=spec.name, line=q.line, query=q.query, relevant=list(q.relevant),
                             top_docs=["docs/keys.md"], first_relevant_rank=1 if q.relevant
                             else None, hit=1.0 if q.relevant else None,
                             mrr=1.0 if q.relevant else None, ndcg10=1.0 if q.relevant else None,
                             recall=1.0 if q.relevant else None, raw_count=3, kept_count=1,
                             latency_ms=2.0) for q in queries]

    def embedding_info(self) -> dict:
        self.calls.append("embedding_info")
        return {"model": "hash-64"}

    def release(self) -> None:
        self.calls.append("release")

    def write_report(self, result: EvalResult, report_dir: str, *, margin: float,
                     accept: bool) -> EvalResult:
        self.calls.append(f"write_report {report_dir} {margin} {accept}")
        return result


def test_the_steps_run_in_order_and_the_result_is_aggregated():
    executor = Recording()
    result = run_evaluation(EvalRequest("q.jsonl", k=5, modes=["dense", "hybrid+mqe2"],
                                        report_dir="out", filters={"types": ["md"]}), executor)
    assert executor.calls == [
        "chat_model", "load_queries q.jsonl", "check_labels default",
        "search_mode dense k=5 types=['markdown']", "search_mode hybrid+mqe2 k=5 types=['markdown']",
        "embedding_info", "release", "write_report out 0.02 False"]
    assert list(result.modes) == ["dense", "hybrid+mqe2"]
    assert result.modes["dense"]["scored"] == 1 and result.modes["dense"]["queries"] == 2
    assert result.embedding == {"model": "hash-64"} and result.filters["types"] == ["markdown"]


@pytest.mark.parametrize("request_", [
    EvalRequest("q.jsonl", modes=["sparse"]), EvalRequest("q.jsonl", k=0),
    EvalRequest("q.jsonl", filters={"modified_since": "yesterday-ish"})])
def test_usage_errors_come_before_any_step(request_):
    executor = Recording()
    with pytest.raises(UsageError):
        run_evaluation(request_, executor)
    assert executor.calls == []


def test_searching_is_released_when_a_search_fails():
    executor = Recording(fail_search=True)
    with pytest.raises(RuntimeError, match="store gone"):
        run_evaluation(EvalRequest("q.jsonl"), executor)
    assert executor.calls[-1] == "release" and not any("write_report" in c for c in
                                                         executor.calls)


def test_the_plain_call_runs_the_sequence_on_a_runtime(runtime, tmp_path):
    """evaluate_plain: data/sample ingested (hash embedder), two modes, reports written."""
    import shutil

    from kbsync.eval.plain import evaluate_plain
    from kbsync.ingest.discover import parse_root
    from kbsync.ingest.runner import run_plain
    from kbsync.query.filters import SearchFilters
    from kbtest import REPO, SAMPLE

    share = tmp_path / "sample"
    shutil.copytree(SAMPLE, share)
    assert run_plain([parse_root(str(share))], runtime=runtime).failed == 0
    reports = tmp_path / "reports"
    result = evaluate_plain(REPO / "data" / "eval" / "sample_queries.jsonl", runtime=runtime,
                            k=5, modes=["dense", "hybrid"], report_dir=reports)
    assert result.queries == 31 and list(result.modes) == ["dense", "hybrid"]
    assert result.gate_ok and result.warnings == []
    assert result.filters == SearchFilters().to_dict()  # as the flow records them
    assert (reports / "latest.json").is_file()
    with pytest.raises(UsageError, match="KBSYNC_LLM_MODEL"):  # before any search
        evaluate_plain(REPO / "data" / "eval" / "sample_queries.jsonl", runtime=runtime,
                       modes=["dense+mqe2"], report_dir=reports)
