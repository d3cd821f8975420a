"""The whole evaluation without Prefect, in one call (tests and scripts): the evaluate
sequence (:mod:`kbsync.eval.sequence`) on the in-process executor.

Its own module so that the evaluation steps (:mod:`kbsync.eval.run`) and the
report writer (:mod:`kbsync.eval.report`, which reads their results) import in
one direction only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from kbsync.catalog.active import serving
from kbsync.eval.queries import EvalQuery, load_queries
from kbsync.eval.report import write_report
from kbsync.eval.run import (EvalResult, ModeSpec, QueryOutcome, SearchRuntime, labels_in,
                             run_mode)
from kbsync.eval.sequence import EvalRequest, run_evaluation
from kbsync.query.llm import ChatModel, chat_model


class InProcess:
    """Every step of the evaluate sequence called at once on ``runtime`` (no Prefect).

    Args:
        runtime: an open :class:`kbsync.runtime.Runtime` (store, embedding service,
            state records: a :class:`~kbsync.eval.run.SearchRuntime`); the caller owns it
            and closes it.
        llm: the chat model of the expanding modes; default: the configured one.
    """

    def __init__(self, runtime: SearchRuntime, *, llm: ChatModel | None = None) -> None:
        self.runtime = runtime
        self._llm = llm

    def chat_model(self) -> ChatModel:
        """The model given, else the configured one (made once)."""
        if self._llm is None:
            self._llm = chat_model(self.runtime.settings)
        return self._llm

    def load_queries(self, queries_file: str) -> list[EvalQuery]:
        """Parse the query file."""
        return load_queries(queries_file)

    def check_labels(self, queries: list[EvalQuery], *, namespace: str) -> list[str]:
        """Against the documents the runtime's state records hold in ``namespace``."""
        return labels_in(queries, self.runtime, namespace)

    def search_mode(self, queries: list[EvalQuery], spec: ModeSpec, *, namespace: str, k: int,
                    filters: dict[str, Any]) -> list[QueryOutcome]:
        """Search on the runtime."""
        return run_mode(queries, spec, runtime=self.runtime, namespace=namespace, k=k,
                        llm=self.chat_model() if spec.needs_llm else None, filters=filters)

    def embedding_info(self) -> dict:
        """The runtime's embedding model."""
        return self.runtime.embedding_info()

    def release(self) -> None:
        """Nothing: the caller owns the runtime."""

    def write_report(self, result: EvalResult, report_dir: str, *, margin: float,
                     accept: bool) -> EvalResult:
        """Gate and reports, written here (the baseline of the collection serving now)."""
        settings = getattr(self.runtime, "settings", None)
        return write_report(result, report_dir, margin=margin, accept=accept,
                            serving=serving(settings) if settings is not None else None)


def evaluate_plain(
    queries_file: str | Path, *, runtime: SearchRuntime, namespace: str = "default", k: int = 10,
    modes: Sequence[str] = ("dense",), report_dir: str | Path = "reports/eval",
    margin: float = 0.02, accept: bool = False, llm: ChatModel | None = None,
    filters: dict[str, Any] | None = None,
) -> EvalResult:
    """The whole evaluation without Prefect: what the ``evaluate`` flow does, in one call.

    The gate's verdict is ``result.gate_ok`` (the flow ends Failed on it).

    Raises:
        UsageError: bad modes, k out of range, a bad filter, no chat model for an
            expanding mode, namespace empty, or bad query file.
    """
    request = EvalRequest(queries_file=queries_file, namespace=namespace, k=k, modes=modes,
                          report_dir=report_dir, margin=margin, accept=accept, filters=filters)
    return run_evaluation(request, InProcess(runtime, llm=llm))
