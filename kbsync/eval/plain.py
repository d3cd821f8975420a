"""The whole evaluation without Prefect, in one call (tests and scripts).

Its own module so that the evaluation steps (:mod:`kbsync.eval.run`) and the
report writer (:mod:`kbsync.eval.report`, which reads their results) import in
one direction only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from kbsync.eval.queries import load_queries
from kbsync.query.llm import ChatModel, chat_model
from kbsync.eval.report import write_report
from kbsync.eval.run import (EvalResult, build_result, check_k, check_labels, parse_modes,
                             run_mode)


def evaluate_plain(
    queries_file: str | Path, *, runtime, namespace: str = "default", k: int = 10,
    modes: Sequence[str] = ("dense",), report_dir: str | Path = "reports/eval",
    margin: float = 0.02, accept: bool = False, llm: ChatModel | None = None,
) -> EvalResult:
    """The whole evaluation without Prefect: what the ``evaluate`` flow does, in one call.

    Raises:
        UsageError: bad modes, k out of range, namespace empty, or bad query file.
    """
    specs = parse_modes(modes)
    check_k(k)
    if llm is None and any(s.needs_llm for s in specs):
        llm = chat_model(runtime.settings)
    queries = load_queries(queries_file)
    warnings = check_labels(queries, set(runtime.states.load(namespace)), namespace)
    outcomes = [o for spec in specs
                for o in run_mode(queries, spec, runtime=runtime, namespace=namespace, k=k,
                                  llm=llm)]
    result = build_result(queries, outcomes, k=k, namespace=namespace, warnings=warnings,
                          embedding=runtime.embedding_info())
    write_report(result, report_dir, margin=margin, accept=accept)
    return result
