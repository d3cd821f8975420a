"""The ``ask`` and ``eval`` subcommands of ``kbsync`` (wired in by :mod:`kbsync.app.cli`).

``kbsync ask`` runs in-process (no Prefect). ``kbsync eval`` runs the
``evaluate`` flow, like ``kbsync ingest`` runs ``ingest``, and exits 3 when the
regression gate trips, printing the numbers on stderr.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import nullcontext

from kbsync.app import cli_support
from kbsync.app.cli_support import namespace_argument, score_argument, text_argument


def _k(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 100:
        raise argparse.ArgumentTypeError("must be between 1 and 100")
    return value


def _margin(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError("must be between 0 and 1")
    return value


def register(sub) -> None:
    """Add ``ask`` and ``eval`` to the ``kbsync`` subparsers."""
    ask = sub.add_parser("ask", help="answer a question from the knowledge base, with citations "
                                     "(needs KBSYNC_LLM_*)")
    ask.add_argument("question", metavar="QUESTION", type=text_argument)
    ask.add_argument("--namespace", type=namespace_argument, default="default")
    ask.add_argument("-k", type=_k, default=5, help="chunks retrieved (default 5)")
    ask.add_argument("--min-score", type=score_argument, default=None, metavar="S",
                     help="ignore chunks scoring below S; nothing above it = no answer "
                          "(default 0.3)")
    ask.add_argument("--json", action="store_true", help="print one JSON object on stdout")

    ev = sub.add_parser("eval", help="evaluate retrieval on labelled queries (Prefect flow)",
                        epilog="Exit 3 when nDCG@10 of a mode dropped by more than --max-drop "
                               "against the last passing run in --report-dir.")
    ev.add_argument("queries_file", metavar="QUERIES_FILE",
                    help="JSONL {query, relevant[]} or CSV query,relevant (| between doc_ids)")
    ev.add_argument("--namespace", type=namespace_argument, default="default")
    ev.add_argument("-k", type=_k, default=10, help="documents ranked per query (default 10)")
    ev.add_argument("--modes", default="dense", metavar="M1,M2",
                    help="comma-separated: dense, hybrid, with +mqeN / +hyde (default dense)")
    ev.add_argument("--report-dir", default="reports/eval", metavar="DIR",
                    help="reports and history (default reports/eval)")
    ev.add_argument("--max-drop", type=_margin, default=0.02, metavar="M",
                    help="allowed nDCG@10 drop per mode before failing (default 0.02)")
    ev.add_argument("--accept", action="store_true",
                    help="record a drop as the new baseline instead of failing")
    ev.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def run_ask(args, settings) -> int:
    """``kbsync ask``: exit 0 also when nothing relevant was found (``answered`` is false)."""
    from kbsync.query.answer import DEFAULT_MIN_SCORE, ask, build_chat_client

    llm = build_chat_client(settings)  # a missing configuration fails before any search
    min_score = DEFAULT_MIN_SCORE if args.min_score is None else args.min_score
    store = cli_support.indexed_store(settings, args.namespace)
    if store is None:  # answered at once, without the model or the chat model
        answer = _nothing_indexed(args, settings, min_score)
    else:
        from kbsync.embed import build_embedding_service

        try:
            answer = ask(args.question, store=store, service=build_embedding_service(settings),
                         collection=settings.collection, llm=llm, namespace=args.namespace,
                         k=args.k, min_score=min_score)
        finally:
            store.close()
    if args.json:
        _emit(answer.to_dict())
    else:
        _print_answer(answer)
    return 0


def run_eval(args, settings) -> int:
    """``kbsync eval``: 0 ok, 2 bad arguments or query file, 3 regression."""
    from kbsync.eval.run import llm_for, load_queries, parse_modes

    modes = [m for m in args.modes.split(",") if m.strip()]
    # Usage errors (unknown mode, no chat model for +mqe, bad file) before any run exists.
    if any(spec.needs_llm for spec in parse_modes(modes)):
        llm_for(settings)
    load_queries(args.queries_file)
    from flows.evaluate import evaluate  # imported late: Prefect's import costs seconds

    from kbsync.app.console import err

    with err.status("kbsync: evaluating (Prefect flow running)...") if not args.json \
            else nullcontext():
        state = evaluate(queries_file=args.queries_file, namespace=args.namespace, k=args.k,
                         modes=modes, report_dir=args.report_dir,
                         regression_margin=args.max_drop, accept_regression=args.accept,
                         return_state=True)
    from kbsync.app.cli import run_result

    data = run_result(state.result(raise_on_failure=False))
    if args.json:
        _emit(data)
    else:
        _print_eval(data)
    regression = data.get("regression", {})
    if not regression.get("passed", True) and not regression.get("accepted"):
        from kbsync.eval.report import gate_message

        print(f"kbsync: retrieval regression against run {regression.get('baseline')}:\n"
              f"{gate_message(regression)}", file=sys.stderr)
        return 3
    return 0


def _nothing_indexed(args, settings, min_score):
    from kbsync.query.answer import Answer

    message = cli_support.nothing_indexed(settings, args.namespace)
    return Answer(query=args.question, namespace=args.namespace, mode="dense", answer=message,
                  answered=False, citations=[], raw_count=0, kept_count=0, results=[],
                  latency_ms=0.0, min_score=min_score)


def _emit(obj: dict) -> None:
    cli_support.emit(obj)


def _print_answer(answer) -> None:
    from kbsync.app.console import out

    out.print(answer.answer, highlight=False, markup=False)
    if answer.citations:
        out.print("")
        out.print("[bold]Sources[/bold]")
    for c in answer.citations:
        pages = ""
        if c.page_start is not None:
            pages = (f", p. {c.page_start}" if c.page_end in (None, c.page_start)
                     else f", p. {c.page_start}-{c.page_end}")
        heading = f', "{c.heading_path}"' if c.heading_path else ""
        out.print(f"[{c.n}] {c.doc_id}{pages}{heading}", highlight=False, markup=False)
    for warning in answer.warnings:
        out.print(f"[yellow]warning[/yellow] {warning}", highlight=False)


def _print_eval(data: dict) -> None:
    from rich.table import Table

    from kbsync.app.console import out

    table = Table(title=f"kbsync eval: namespace {data['namespace']}, {data['queries']} queries, "
                        f"k={data['k']}")
    columns = {"hit_rate": f"hit@{data['k']}", "mrr": "MRR", "ndcg@10": "nDCG@10",
               "recall@k": f"recall@{data['k']}", "raw_count_mean": "raw",
               "kept_count_mean": "kept", "latency_ms_p50": "p50 ms", "latency_ms_p95": "p95 ms"}
    table.add_column("mode")
    for label in columns.values():
        table.add_column(label, justify="right")
    for mode, metrics in data["modes"].items():
        table.add_row(mode, *("-" if metrics[c] is None else f"{metrics[c]:.4g}"
                              for c in columns))
    out.print(table)
    for warning in data.get("warnings", []):
        out.print(f"[yellow]warning[/yellow] {warning}", highlight=False)
    report = data.get("report", {})
    if report:
        out.print(f"report: {report.get('summary_md')}", highlight=False)


COMMANDS = {"ask": run_ask, "eval": run_eval}
"""Subcommand name -> handler ``(args, settings) -> exit code``, merged into cli.main's table."""
