"""The ``kbsync`` command.

Exit codes: 0 ok; 1 run failed; 2 usage error (bad arguments, a ROOT that does
not exist); 3 completed but some files failed. With ``--json`` stdout holds
exactly one JSON object and every log line goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Sequence

from kbsync import cli_query
from kbsync.errors import KbsyncError, UsageError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_PARTIAL = 0, 1, 2, 3
log = logging.getLogger("kbsync.cli")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also the source of ``--help``)."""
    parser = argparse.ArgumentParser(
        prog="kbsync", description="Keep a Qdrant knowledge base in sync with document folders.",
        epilog="Exit codes: 0 ok, 1 run failed, 2 usage error, 3 some files failed. "
               "Configuration comes from KBSYNC_* environment variables (see README).")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    ing = sub.add_parser("ingest", help="sync directories into the knowledge base (Prefect flow)")
    ing.add_argument("roots", nargs="+", metavar="ROOT", help="directory, or NAME=PATH")
    ing.add_argument("--namespace", default="default", help="namespace (default: default)")
    ing.add_argument("--mode", choices=["incremental", "full"], default="incremental",
                     help="full also deletes documents of these roots that are gone")
    ing.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    ing.add_argument("--force", action="store_true", help="reprocess every file")
    ing.add_argument("--include", action="append", default=[], metavar="GLOB",
                     help="only files matching GLOB (repeatable)")
    ing.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                     help="leave out files matching GLOB (repeatable)")
    ing.add_argument("--allow-mass-delete", action="store_true",
                     help="let full mode empty a root or delete over --max-delete-fraction")
    ing.add_argument("--max-delete-fraction", type=_fraction, default=0.5, metavar="F",
                     help="full mode refuses to delete more than this share (default 0.5)")
    ing.add_argument("--json", action="store_true", help="print one JSON object on stdout")

    srch = sub.add_parser("search", help="search the knowledge base (no Prefect server needed)")
    srch.add_argument("query", metavar="QUERY")
    srch.add_argument("--namespace", default="default")
    srch.add_argument("-k", type=_k, default=5, help="number of results (default 5)")
    srch.add_argument("--min-score", type=float, default=None, metavar="S",
                      help="drop hits scoring below S (cosine in dense mode, RRF in hybrid)")
    srch.add_argument("--mode", choices=["dense", "hybrid"], default="hybrid",
                      help="dense vectors only, or dense + BM25 fused by RRF (default hybrid: it scored higher on data/eval, see README)")
    srch.add_argument("--mqe", type=_mqe, default=0, metavar="N",
                      help="also search N rephrasings written by the chat model (KBSYNC_LLM_*)")
    srch.add_argument("--hyde", action="store_true",
                      help="also search a hypothetical answer written by the chat model")
    srch.add_argument("--json", action="store_true", help="print one JSON object on stdout")

    st = sub.add_parser("stats", help="documents and chunks per namespace")
    st.add_argument("--namespace", default=None, help="only this namespace")
    st.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    cli_query.register(sub)
    return parser


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError("must be between 0 and 1")
    return value


def _mqe(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 10:
        raise argparse.ArgumentTypeError("must be between 0 and 10")
    return value


def _k(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 100:
        raise argparse.ArgumentTypeError("must be between 1 and 100")
    return value


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    # Core modules log through `logging`; let Prefect forward them to the run's logs.
    os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "kbsync")
    # Without PREFECT_API_URL Prefect starts a temporary server; on 2 cores it can take
    # over 20 s (its default limit), so allow more before calling the run failed.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # no network here


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    _setup_logging(args.verbose)
    from kbsync.settings import Settings

    try:
        settings = Settings()
        command = {"ingest": _ingest, "search": _search, "stats": _stats,
                   **cli_query.COMMANDS}[args.command]
        return command(args, settings)
    except UsageError as exc:
        print(f"kbsync: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KbsyncError as exc:
        print(f"kbsync: {exc.kind}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except Exception as exc:  # noqa: BLE001 - e.g. Prefect's API unreachable: one clear line
        log.debug("run failed", exc_info=True)
        first = str(exc).splitlines()[0] if str(exc) else ""
        print(f"kbsync: run failed: {type(exc).__name__}: {first}", file=sys.stderr)
        return EXIT_FAILED


def _ingest(args, settings) -> int:
    from kbsync.discover import parse_root
    from kbsync.models import SyncMode

    for root in args.roots:  # a missing root is a usage error before any run exists
        parse_root(root)
    from flows.ingest import ingest  # imported late: Prefect's import costs seconds

    from kbsync.console import ingest_status, print_ingest

    with ingest_status(enabled=not args.json):
        state = ingest(roots=list(args.roots), namespace=args.namespace,
                       mode=SyncMode(args.mode), force=args.force, dry_run=args.dry_run,
                       include=args.include, exclude=args.exclude,
                       allow_mass_delete=args.allow_mass_delete,
                       max_delete_fraction=args.max_delete_fraction, return_state=True)
    summary = state.result(raise_on_failure=False)
    if not isinstance(summary, dict):
        raise _as_kbsync_error(summary)
    if args.json:
        _emit(summary)
    else:
        print_ingest(summary)
    return EXIT_PARTIAL if summary["failed"] else EXIT_OK


def _as_kbsync_error(error) -> KbsyncError:
    if isinstance(error, KbsyncError):
        return error
    return KbsyncError(f"run failed: {error}")


def _search(args, settings) -> int:
    from kbsync.console import out, print_search
    from kbsync.runtime import Runtime
    from kbsync.search import configured_llm, search

    llm = configured_llm(settings) if (args.mqe or args.hyde) else None
    runtime = Runtime.open(settings)
    try:
        if runtime.store.collection_dimension(settings.collection) is None:
            log.warning("collection %s does not exist yet: run `kbsync ingest` first",
                        settings.collection)
        result = search(args.query, store=runtime.store, service=runtime.service,
                        collection=settings.collection, namespace=args.namespace, k=args.k,
                        min_score=args.min_score, mode=args.mode, mqe=args.mqe,
                        hyde=args.hyde, llm=llm)
    finally:
        runtime.close()
    if args.json:
        _emit(result.to_dict())
        return EXIT_OK
    print_search(result)
    for text in result.expansions:
        out.print(f"  also searched: {' '.join(text.split())[:160]}", highlight=False,
                  markup=False)
    for note in result.notes:
        out.print(f"  note: {note}", highlight=False, markup=False)
    return EXIT_OK


def _stats(args, settings) -> int:
    from kbsync.console import print_stats
    from kbsync.stats import collect_stats
    from kbsync.store import open_store

    store = open_store(settings)
    try:
        data = collect_stats(store, settings, args.namespace)
    finally:
        store.close()
    _emit(data) if args.json else print_stats(data)
    return EXIT_OK


def _emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
