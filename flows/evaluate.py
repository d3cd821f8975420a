"""The ``evaluate`` flow: labelled queries -> search per mode -> metrics, reports, gate.

The flow only arranges tasks: the sequence is :func:`kbsync.eval.sequence.run_evaluation`
(the plain call's too), each step a task (``tasks.eval_tasks.PrefectEvalExecutor``); the
work lives in :mod:`kbsync.eval.run` and :mod:`kbsync.eval.report`. It ends Failed (returning the JSON result as the
state's data, like ``ingest``) when the regression gate trips: nDCG@10 of a
mode dropped by more than ``regression_margin`` against the baseline run.
"""

from __future__ import annotations

from typing import Annotated, Any

from prefect import flow, get_run_logger
from prefect.states import Failed
from pydantic import Field

from kbsync.errors import RetrievalRegression
from kbsync.eval.report import gate_message, regression_advice
from kbsync.eval.sequence import EvalRequest, run_evaluation
from kbsync.catalog.active import resolve
from kbsync.settings import load_settings
from tasks import eval_tasks as t
from tasks.run_names import evaluate_run_name


@flow(name="evaluate", flow_run_name=evaluate_run_name, log_prints=False, validate_parameters=True)
def evaluate(
    queries_file: Annotated[str, Field(min_length=1)],
    namespace: Annotated[str, Field(min_length=1, max_length=200)] = "default",
    k: Annotated[int, Field(ge=1, le=100)] = 10,
    modes: Annotated[list[str], Field(min_length=1)] = ["hybrid"],  # noqa: B006 - literal default
    report_dir: Annotated[str, Field(min_length=1)] = "reports/eval",
    regression_margin: Annotated[float, Field(ge=0, le=1)] = 0.02,
    accept_regression: bool = False,
    filters: dict[str, Any] | None = None,
) -> dict:
    """Evaluate retrieval over a labelled query set and return the JSON result.

    Parameter descriptions live here: Prefect builds the deployment form's schema
    from this Args section (it drops ``Field(description=...)`` metadata).

    Args:
        queries_file: JSONL ({"query": ..., "relevant": [doc_id, ...]}) or CSV (query,relevant with |-separated doc_ids) file of labelled queries.
        namespace: Namespace to search; the labelled doc_ids must live there.
        k: Documents ranked per query for hit@k, MRR@k and recall@k (nDCG is always @10).
        modes: Retrieval modes to compare: dense, hybrid (what kbsync search uses), optionally +mqeN / +hyde (e.g. dense+mqe3).
        report_dir: Folder for per-run CSV/Markdown/PNG, latest.json and history.jsonl; the gate compares with earlier runs kept here.
        regression_margin: The run fails when nDCG@10 of any mode drops by more than this against the baseline run.
        accept_regression: Record a drop as the new baseline instead of failing.
        filters: Query-time filters for every search: root, path_prefix, types (list), modified_since (ISO date or datetime).
    """  # noqa: E501 - one line per parameter keeps Prefect's docstring parser exact
    logger = get_run_logger()
    # The active collection, with its model (kbsync.catalog.active).
    settings = resolve(load_settings())
    # The sequence is the plain call's too (kbsync.eval.sequence); here each step is a task.
    request = EvalRequest(queries_file=queries_file, namespace=namespace, k=k, modes=modes,
                          report_dir=report_dir, margin=regression_margin,
                          accept=accept_regression, filters=filters)
    result = run_evaluation(request, t.PrefectEvalExecutor(settings))
    t.publish_eval(result)  # in the flow body: the artifacts belong to this flow run
    for mode, metrics in result.modes.items():
        logger.info("eval %s %s: hit@%d %.3f, MRR %.3f, nDCG@10 %.3f, p50 %.1f ms", namespace,
                    mode, k, metrics["hit_rate"] or 0, metrics["mrr"] or 0,
                    metrics["ndcg@10"] or 0, metrics["latency_ms_p50"])
    data = result.to_dict()
    if not result.gate_ok:
        message = "retrieval regression: " + gate_message(result.regression)
        # At WARNING, one line: the UI's "Warning and above" view shows what dropped, what
        # changed and what to do (accept_regression, or a rollback).
        logger.warning("%s; %s", message.replace("\n", "; "),
                       regression_advice(result.regression))
        # The result rides on an exception: Prefect resolves a Failed state's data into one.
        # A flow may return a State to set its final state (Prefect resolves it at run time);
        # Prefect's types take the annotation as the only return type.
        return Failed(message=message,  # type: ignore[return-value]
                      data=RetrievalRegression(message, data))
    return data
