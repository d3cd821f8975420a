"""The ``eval`` subcommand of ``kbsync`` (wired in by :mod:`kbsync.app.cli`).

``kbsync eval`` runs the ``evaluate`` flow, like ``kbsync ingest`` runs
``ingest``, and exits 3 when the regression gate trips, printing the numbers on
stderr.
"""

from __future__ import annotations

import sys
from contextlib import nullcontext

from kbsync.app import cli_filters, cli_support
from kbsync.app.cli_support import fraction_argument, k_argument, namespace_argument, run_result


def register(sub) -> None:
    """Add ``eval`` to the ``kbsync`` subparsers."""
    ev = sub.add_parser("eval", help="evaluate retrieval on labelled queries (Prefect flow)",
                        epilog="Exit 3 when nDCG@10 of a mode dropped by more than --max-drop "
                               "against the last passing run in --report-dir.")
    ev.add_argument("queries_file", metavar="QUERIES_FILE",
                    help="JSONL {query, relevant[]} or CSV query,relevant (| between doc_ids)")
    ev.add_argument("--namespace", type=namespace_argument, default="default", metavar="NS",
                    help="namespace the queries are evaluated in (default: default)")
    ev.add_argument("-k", type=k_argument, default=10,
                    help="documents ranked per query (default 10)")
    ev.add_argument("--modes", default="hybrid", metavar="M1,M2",
                    help="comma-separated: dense, hybrid, with +mqeN / +hyde (default hybrid, "
                         "what search uses; see docs/retrieval.md)")
    ev.add_argument("--report-dir", default="reports/eval", metavar="DIR",
                    help="reports and history (default reports/eval)")
    ev.add_argument("--max-drop", type=fraction_argument, default=0.02, metavar="M",
                    help="allowed nDCG@10 drop per mode before failing (default 0.02)")
    ev.add_argument("--accept", action="store_true",
                    help="record a drop as the new baseline instead of failing")
    ev.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    cli_filters.register(ev, reader=False)


def run_eval(args, settings) -> int:
    """``kbsync eval``: 0 ok, 2 bad arguments or query file, 3 regression."""
    from kbsync.eval.run import load_queries, parse_modes
    from kbsync.query.llm import chat_model

    modes = [m for m in args.modes.split(",") if m.strip()]
    # Usage errors (unknown mode, no chat model for +mqe, bad file) before any run exists.
    if any(spec.needs_llm for spec in parse_modes(modes)):
        chat_model(settings)
    load_queries(args.queries_file)
    from flows.evaluate import evaluate  # imported late: Prefect's import costs seconds
    from kbsync.app.console import err

    with err.status("kbsync: evaluating (Prefect flow running)...") if not args.json \
            else nullcontext():
        state = evaluate(queries_file=args.queries_file, namespace=args.namespace, k=args.k,
                         modes=modes, report_dir=args.report_dir,
                         regression_margin=args.max_drop, accept_regression=args.accept,
                         filters=cli_filters.filters_of(args).to_dict(), return_state=True)
    data = run_result(state.result(raise_on_failure=False))
    if args.json:
        cli_support.emit(data)
    else:
        _print_eval(data)
    regression = data.get("regression", {})
    if not regression.get("passed", True) and not regression.get("accepted"):
        from kbsync.eval.report import gate_message

        print(f"kbsync: retrieval regression against run {regression.get('baseline')}:\n"
              f"{gate_message(regression)}", file=sys.stderr)
        return 3
    return 0


def _print_eval(data: dict) -> None:
    from rich.table import Table

    from kbsync.app.console import labelled, out

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
        out.print(labelled("yellow", "warning", warning), highlight=False)
    report = data.get("report", {})
    if report:
        out.print(f"report: {report.get('summary_md')}", highlight=False)


COMMANDS = {"eval": run_eval}
"""Subcommand name -> handler ``(args, settings) -> exit code``, merged into cli.main's table."""
