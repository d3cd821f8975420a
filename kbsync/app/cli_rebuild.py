"""The ``rebuild`` subcommand of ``kbsync`` (wired in by :mod:`kbsync.app.cli`).

``kbsync rebuild --queries FILE`` runs the ``rebuild`` flow (:mod:`flows.rebuild`)
with the environment's ``KBSYNC_*`` settings as the new ones, and exits 3 when the
evaluation gate refused the swap. ``kbsync rebuild --rollback`` serves the previous
collection again, and ``kbsync rebuild --restore NAME`` points the collection at NAME
(after a lost pointer); both are plain library code under the write lock (no Prefect run).
"""

from __future__ import annotations

import sys
from contextlib import nullcontext

from kbsync.app import cli_support
from kbsync.app.terminal import terminal_safe
from kbsync.app.cli_support import (EXIT_OK, EXIT_PARTIAL, fraction_argument, namespace_argument,
                                     run_result)


def register(sub) -> None:
    """Add ``rebuild`` to the ``kbsync`` subparsers."""
    rb = sub.add_parser(
        "rebuild", help="rebuild with new settings in a shadow collection, swap it in if its "
                        "evaluation is no worse (Prefect flow)",
        epilog="The new settings are this command's KBSYNC_* environment (embedding "
               "provider/model/dimensions, chunk budget/overlap, contextual text). Search "
               "keeps serving the live collection until the swap. Exit 3 when the gate "
               "refused the swap (the live collection stays).")
    what = rb.add_mutually_exclusive_group(required=True)
    what.add_argument("--queries", metavar="FILE",
                      help="labelled queries (JSONL or CSV, as for eval), run on both collections")
    what.add_argument("--rollback", action="store_true",
                      help="serve the collection the last rebuild replaced again")
    what.add_argument("--restore", metavar="NAME",
                      help="serve collection NAME (KBSYNC_COLLECTION or one of its rebuilt "
                           "<name>__r<N>) again, e.g. after the active pointer was lost")
    rb.add_argument("--namespace", type=namespace_argument, default="default",
                    help="namespace the queries are evaluated in (every namespace is rebuilt)")
    rb.add_argument("--max-drop", type=fraction_argument, default=0.02, metavar="M",
                    help="largest allowed nDCG@10 drop of the shadow, any mode (default 0.02)")
    rb.add_argument("--modes", default="dense,hybrid", metavar="M1,M2",
                    help="retrieval modes compared, each must pass (default dense,hybrid)")
    rb.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def run_rebuild(args, settings) -> int:
    """``kbsync rebuild``: 0 swapped (or rolled back, or restored), 2 usage error, 3 refused."""
    if args.rollback:
        return _rollback(args, settings)
    if args.restore:
        return _restore(args, settings)
    from kbsync.eval.run import load_queries, parse_modes

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    parse_modes(modes)  # usage errors before any run exists
    load_queries(args.queries)
    from kbsync.catalog import active

    if active.read_record(settings) is None:  # a lost pointer: refused before any flow run
        active.refuse_if_orphaned(settings)
    from kbsync.catalog.lock import refuse_if_held

    refuse_if_held(settings, args.namespace)  # an ingest runs: LockHeld before any flow run
    from flows.rebuild import rebuild  # imported late: Prefect's import costs seconds
    from kbsync.app.console import err

    with err.status("kbsync: rebuilding (Prefect flow running)...") if not args.json \
            else nullcontext():
        state = rebuild(queries_file=args.queries, namespace=args.namespace,
                        max_drop=args.max_drop, modes=modes, return_state=True)
    report = run_result(state.result(raise_on_failure=False))
    if args.json:
        cli_support.emit(report)
    else:
        _print(report)
    if not report["swapped"]:
        reasons = "; ".join(report["decision"]["reasons"])
        print("kbsync: rebuild refused: " + terminal_safe(reasons, one_line=True),
              file=sys.stderr)
        return EXIT_PARTIAL
    return EXIT_OK


def _rollback(args, settings) -> int:
    import time

    from kbsync.app.locks import write_locks
    from kbsync.maintenance.rebuild import rollback_locked, serving_line

    started = time.perf_counter()
    pointer = rollback_locked(write_locks(settings), args.namespace)  # the door's one decision
    data = {"rolled_back": True, "pointer": pointer,
            "duration_s": round(time.perf_counter() - started, 3)}
    if args.json:
        cli_support.emit(data)
    else:
        print(f"kbsync: {serving_line(pointer)}")
    return EXIT_OK


def _restore(args, settings) -> int:
    from kbsync.app.locks import write_locks
    from kbsync.maintenance.rebuild import restore_locked, serving_line

    pointer = restore_locked(write_locks(settings), args.restore, args.namespace)
    if args.json:
        cli_support.emit({"restored": True, "pointer": pointer})
    else:
        print(f"kbsync: {serving_line(pointer)}")
    return EXIT_OK


def _print(report: dict) -> None:
    from rich.table import Table

    from kbsync.app.console import labelled, out
    from kbsync.maintenance.rebuild_checks import gate_line

    plan, decision = report["plan"], report["decision"]
    verdict = "swapped" if report["swapped"] else "refused"
    table = Table(title=f"kbsync rebuild {plan['logical']}: {plan['live']} -> {plan['shadow']}"
                        f" ({verdict}, {report['duration_s']} s)")
    for column in ("mode", "live nDCG@10", "shadow nDCG@10", "delta", "ok"):
        table.add_column(column, justify="left" if column == "mode" else "right")
    for mode, m in decision["modes"].items():
        table.add_row(mode, *("-" if m[c] is None else f"{m[c]:.4g}" if c != "ok" else str(m[c])
                              for c in ("live", "shadow", "delta", "ok")))
    out.print(table)
    if gate_line(decision):
        out.print(gate_line(decision), highlight=False)
    for reason in decision["reasons"]:
        out.print(labelled("yellow", "refused", reason), highlight=False)


COMMANDS = {"rebuild": run_rebuild}
"""Subcommand name -> handler ``(args, settings) -> exit code``, merged into cli.main's table."""
