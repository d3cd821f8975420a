"""The one evaluate sequence: :func:`run_evaluation` decides *what* runs and in which
order; an :class:`EvalExecutor` decides *where* (as the ingest runner and its executors).

    check modes, k, filters and the chat model (usage errors, before any work)
    -> load queries -> check labels -> search each mode, one after the other
    -> embedding info -> release -> aggregate -> report and gate

Two executors: :class:`kbsync.eval.plain.InProcess` calls each step at once on a
runtime it is given (``evaluate_plain``: tests, scripts); ``tasks.eval_tasks.PrefectEvalExecutor``
runs each step as a Prefect task of the ``evaluate`` flow, on the runtime of the flow's
settings. Both get the same calls, so the flow and the plain call cannot drift. What
only a flow does (artifacts, a Failed state when the gate trips) stays in the flow.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Sequence

from kbsync.eval.queries import EvalQuery
from kbsync.eval.run import EvalResult, ModeSpec, QueryOutcome, build_result, check_k, parse_modes
from kbsync.query.filters import SearchFilters
from kbsync.query.llm import ChatModel


@dataclass(frozen=True)
class EvalRequest:
    """One evaluation: what the ``evaluate`` flow's parameters name.

    Attributes:
        queries_file: JSONL or CSV labelled queries (:mod:`kbsync.eval.queries`).
        namespace: where the labelled doc_ids live.
        k: documents ranked per query (1..100).
        modes: retrieval modes, ``MODE[+mqeN][+hyde]``.
        report_dir: reports and history; the gate compares with runs kept there.
        margin: the largest nDCG@10 drop per mode before the gate trips.
        accept: record a drop as the new baseline instead of tripping.
        filters: query-time filters (the JSON form of :class:`SearchFilters`).
    """

    queries_file: str | Path
    namespace: str = "default"
    k: int = 10
    modes: Sequence[str] = ("dense",)
    report_dir: str | Path = "reports/eval"
    margin: float = 0.02
    accept: bool = False
    filters: dict[str, Any] | None = None


class EvalExecutor(Protocol):
    """Runs the steps of :func:`run_evaluation`.

    Limits: a step writes nothing but the report (searching is read-only, so a
    retried step simply searches again); ``search_mode`` calls come one after the
    other, never together, so each mode's latency is measured without competition.
    Tested through both executors: ``tests/eval/test_sequence.py`` (in process) and
    ``tests/flows/test_evaluate_flow.py`` (Prefect).
    """

    def chat_model(self) -> ChatModel:
        """The chat model the expanding modes use (raises ``LLMNotConfigured``)."""

    def load_queries(self, queries_file: str) -> list[EvalQuery]:
        """Parse the query file (every bad line at once: ``QueryFileError``)."""

    def check_labels(self, queries: list[EvalQuery], *, namespace: str) -> list[str]:
        """Warnings for labelled doc_ids the namespace lacks; fails when it holds nothing."""

    def search_mode(self, queries: list[EvalQuery], spec: ModeSpec, *, namespace: str, k: int,
                    filters: dict[str, Any]) -> list[QueryOutcome]:
        """Search and score every query under one mode."""

    def embedding_info(self) -> dict:
        """The embedding model the searches used (recorded with the result)."""

    def release(self) -> None:
        """Searching is over: let go of what only searching needed."""

    def write_report(self, result: EvalResult, report_dir: str, *, margin: float,
                     accept: bool) -> EvalResult:
        """Run the regression gate and write the reports; the result with both filled."""


def run_evaluation(request: EvalRequest, executor: EvalExecutor) -> EvalResult:
    """Evaluate retrieval over a labelled query set (see the module doc for the order).

    The result carries the gate's verdict (``gate_ok``); ending a run on it is the
    caller's.

    Raises:
        UsageError: bad modes, k out of range, a bad filter, no chat model for an
            expanding mode, a bad query file, or a namespace without documents.
    """
    specs = parse_modes(request.modes)  # a mode search does not support: before work
    check_k(request.k)
    # A bad filter is a usage error before work; the JSON form travels on (plain values).
    filters = SearchFilters.build(**(request.filters or {})).to_dict()
    if any(spec.needs_llm for spec in specs):
        executor.chat_model()  # +mqe/+hyde without a chat model: a usage error, before work
    queries = executor.load_queries(str(request.queries_file))
    try:
        warnings = executor.check_labels(queries, namespace=request.namespace)
        outcomes: list[QueryOutcome] = []
        for spec in specs:  # one after the other: latencies measured without competition
            outcomes += executor.search_mode(queries, spec, namespace=request.namespace,
                                             k=request.k, filters=filters)
        embedding = executor.embedding_info()
    finally:
        executor.release()
    result = build_result(queries, outcomes, k=request.k, namespace=request.namespace,
                          warnings=warnings, embedding=embedding, filters=filters)
    return executor.write_report(result, str(request.report_dir), margin=request.margin,
                                 accept=request.accept)
