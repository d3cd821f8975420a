"""The evaluation steps as Prefect tasks: thin wrappers over :mod:`kbsync.eval.run`.

One task per retrieval mode, run one after the other so each mode's latency
is measured without the others competing for the CPU. Searching writes
nothing, so a retried task simply searches again. :func:`publish_eval` is
not a task: the flow calls it so its artifacts belong to the flow run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from kbsync.catalog.active import serving
from kbsync.eval import run as ev
from kbsync.eval.report import summary_markdown, table_rows, write_report
from kbsync.eval.trend import drops_markdown, trend_markdown
from kbsync.ingest.report import artifact_key
from kbsync.query.llm import ChatModel, chat_model
from kbsync.settings import Settings
from tasks.options import COMMON, transient
from tasks.resources import release, runtime_for


@task(name="load-queries", task_run_name="load-queries", **COMMON)
def load_queries(queries_file: str) -> list[ev.EvalQuery]:
    """Parse the query file; every bad line is reported at once (QueryFileError)."""
    return ev.load_queries(queries_file)


@task(name="check-labels", task_run_name="check-labels", retries=2, retry_delay_seconds=2,
      retry_condition_fn=transient, **COMMON)
def check_labels(queries: list[ev.EvalQuery], settings: Settings, *, namespace: str) -> list[str]:
    """Warnings for labelled doc_ids the namespace lacks; fails when it holds nothing."""
    return ev.labels_in(queries, runtime_for(settings), namespace)


@task(name="search-mode", retries=2, retry_delay_seconds=5,
      retry_condition_fn=transient, task_run_name="search-{spec.name}", **COMMON)
def search_mode(queries: list[ev.EvalQuery], spec: ev.ModeSpec, settings: Settings, *,
                namespace: str, k: int, filters: dict | None = None) -> list[ev.QueryOutcome]:
    """Search and score every query under one mode (``filters``: see ``ev.run_mode``)."""
    runtime = runtime_for(settings)
    return ev.run_mode(queries, spec, runtime=runtime, namespace=namespace, k=k,
                       llm=chat_model(settings) if spec.needs_llm else None, filters=filters)


@task(name="write-report", task_run_name="write-report", **COMMON)
def write_eval_report(result: ev.EvalResult, report_dir: str, *, margin: float,
                      accept: bool, serving: dict | None = None) -> ev.EvalResult:
    """Run the regression gate and write CSV, Markdown, chart, latest.json and history
    (``serving``: what was measured, :func:`kbsync.catalog.active.serving`)."""
    return write_report(result, report_dir, margin=margin, accept=accept, serving=serving)


class PrefectEvalExecutor:
    """The evaluate sequence's steps (:func:`kbsync.eval.sequence.run_evaluation`) as
    Prefect tasks of the flow run, on the runtime of ``settings`` (opened by the first
    task that needs it, released once searching is over).

    Args:
        settings: the flow's settings, aimed at the active collection.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def chat_model(self) -> ChatModel:
        """The configured chat model (each search task makes its own from the settings)."""
        return chat_model(self.settings)

    def load_queries(self, queries_file: str) -> list[ev.EvalQuery]:
        """The ``load-queries`` task."""
        return load_queries(queries_file)

    def check_labels(self, queries: list[ev.EvalQuery], *, namespace: str) -> list[str]:
        """The ``check-labels`` task."""
        return check_labels(queries, self.settings, namespace=namespace)

    def search_mode(self, queries: list[ev.EvalQuery], spec: ev.ModeSpec, *, namespace: str,
                    k: int, filters: dict[str, Any]) -> list[ev.QueryOutcome]:
        """The ``search-<mode>`` task."""
        return search_mode(queries, spec, self.settings, namespace=namespace, k=k,
                           filters=filters)

    def embedding_info(self) -> dict:
        """The runtime's embedding model (no task: nothing to retry)."""
        return runtime_for(self.settings).embedding_info()

    def release(self) -> None:
        """Close the runtime the searches used."""
        release(self.settings)

    def write_report(self, result: ev.EvalResult, report_dir: str, *, margin: float,
                     accept: bool) -> ev.EvalResult:
        """The ``write-report`` task, against the baseline of the collection serving now."""
        return write_eval_report(result, report_dir, margin=margin, accept=accept,
                                 serving=serving(self.settings))


def report_paths_markdown(result: ev.EvalResult) -> str:
    """Where this run's reports were written, as a Markdown list (paths as written)."""
    report = result.report
    return "\n".join([
        "## Reports", "",
        f"- per-query CSV: `{report.get('per_query_csv', '?')}`",
        f"- chart PNG (on the worker's disk; the tables above give its figures): "
        f"`{report.get('chart_png', '?')}`",
        f"- summary Markdown: `{report.get('summary_md', '?')}`",
        (f"- result JSON: `{report.get('result_json', '?')}` (latest: "
         f"`{report.get('latest_json', '?')}`, history: `{report.get('history', '?')}`)"),
    ]) + "\n"


def publish_eval(result: ev.EvalResult) -> None:
    """Table and Markdown artifacts under keys stable per namespace (history in the UI).

    The summary shows, inline, the trend of nDCG@10 per mode over the last runs and the
    queries that dropped most against the baseline (:mod:`kbsync.eval.trend`): the UI
    cannot show the chart PNG on the worker's disk.

    A plain function called from the flow body, not a task: Prefect attaches an
    artifact to the innermost run, so created here they belong to the evaluate
    flow run (``task_run_id`` None) and show on its page. Both name the folder
    and files the reports went to; ``result.report`` must be filled
    (:func:`write_eval_report` ran).
    """
    ns = result.namespace
    folder = str(Path(result.report.get("summary_md", "?")).parent)
    create_table_artifact(key=artifact_key("kbsync-eval", ns), table=table_rows(result),
                          description=f"kbsync retrieval metrics per mode, namespace {ns}; "
                                      f"reports (CSV, PNG, Markdown) in `{folder}`")
    create_markdown_artifact(key=artifact_key("kbsync-eval-summary", ns),
                             markdown="\n".join([summary_markdown(result),
                                                  trend_markdown(result), drops_markdown(result),
                                                  report_paths_markdown(result)]),
                             description=f"kbsync evaluation summary, namespace {ns}; "
                                         f"reports in `{folder}`")
