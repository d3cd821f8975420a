"""The ``kbsync`` command.

Exit codes: 0 ok; 1 run failed; 2 usage error (bad arguments or configuration, a
ROOT that does not exist); 3 completed but some files failed; 130 interrupted (Ctrl-C);
143 and 129 stopped by SIGTERM and SIGHUP (:mod:`kbsync.app.cli_signals`).
With ``--json`` stdout holds exactly one JSON object on every exit path (with
``error: {kind, message}`` on failure, see :mod:`kbsync.app.cli_support`) and every
log line goes to stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Sequence

from kbsync.app import cli_ask, cli_eval, cli_filters, cli_mcp, cli_rebuild

from kbsync.app import cli_remove, cli_serve, cli_signals

from kbsync.app import cli_support

from kbsync.app import cli_verify
from kbsync.app.cli_support import (EXIT_FAILED, EXIT_OK, EXIT_PARTIAL, EXIT_USAGE,  # noqa: F401
                                fraction_argument, k_argument, namespace_argument, run_result,
                                score_argument, text_argument)
log = logging.getLogger("kbsync.app.cli")
UNRESOLVED = frozenset({"rebuild", "mcp", "serve"})
"""Commands handed the settings as configured, not aimed at the active collection once."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also the source of ``--help``)."""
    parser = cli_support.ArgumentParser(
        prog="kbsync", description="Keep a Qdrant knowledge base in sync with document folders.",
        epilog="Exit codes: 0 ok, 1 run failed, 2 usage error, 3 some files failed (verify: "
               "drift found or left); 130, 143, 129 stopped by SIGINT, SIGTERM, SIGHUP (the "
               "JSON still carries an error). "
               "Configuration comes from KBSYNC_* environment variables (see docs/reference/configuration.md).")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", required=True)

    ing = sub.add_parser("ingest", help="sync directories into the knowledge base (a Prefect flow "
                         "run with PREFECT_API_URL, else in this process; see docs/OPERATIONS.md)")
    ing.add_argument("roots", nargs="+", metavar="ROOT", help="directory, or NAME=PATH")
    ing.add_argument("--namespace", type=namespace_argument, default="default",
                     help="namespace (default: default)")
    ing.add_argument("--mode", choices=["incremental", "full"], default="incremental",
                     help="full also deletes documents of these roots that are gone (never those "
                          "--include/--exclude leave out)")
    ing.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    ing.add_argument("--force", action="store_true",
                     help="reprocess every file, failed ones unchanged since they failed included")
    ing.add_argument("--include", action="append", default=[], metavar="GLOB",
                     help="only files matching GLOB (repeatable)")
    ing.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                     help="leave out files matching GLOB (repeatable)")
    ing.add_argument("--allow-mass-delete", action="store_true",
                     help="let full mode empty a root or delete over --max-delete-fraction")
    ing.add_argument("--max-delete-fraction", type=fraction_argument, default=0.5, metavar="F",
                     help="full mode refuses to delete more than this share (default 0.5)")
    ing.add_argument("--rebind", action="store_true",
                     help="a root NAME bound to another path moved here: bind it to this "
                          "path and keep its documents; a root overlapping another bound root "
                          "replaces it (the other root's documents are removed)")
    ing.add_argument("--json", action="store_true", help="print one JSON object on stdout")

    srch = sub.add_parser("search", help="search the knowledge base (no Prefect server needed)")
    srch.add_argument("query", metavar="QUERY", type=text_argument)
    srch.add_argument("--namespace", type=namespace_argument, default="default", metavar="NS",
                      help="namespace searched (default: default; `kbsync stats` lists them)")
    srch.add_argument("-k", type=k_argument, default=5, help="number of results (default 5)")
    srch.add_argument("--min-score", type=score_argument, default=None, metavar="S",
                      help="drop hits scoring below S (cosine in dense mode, fused score 0-1 in hybrid)")
    srch.add_argument("--mode", choices=["dense", "hybrid"], default="hybrid",
                      help="dense vectors only, or dense + BM25 by weighted score fusion (default hybrid: it scored highest on the real English and Chinese sets in data/eval, see docs/retrieval.md)")
    srch.add_argument("--mqe", type=_mqe, default=0, metavar="N",
                      help="also search N rephrasings written by the chat model (KBSYNC_LLM_*)")
    srch.add_argument("--hyde", action="store_true",
                      help="also search a hypothetical answer written by the chat model")
    srch.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    cli_filters.register(srch)

    st = sub.add_parser("stats", help="documents and chunks per namespace")
    st.add_argument("--namespace", type=namespace_argument, default=None, metavar="NS",
                    help="only this namespace")
    st.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    cli_filters.register_reader(st)
    cli_ask.register(sub)
    cli_eval.register(sub)
    cli_remove.register(sub)
    cli_verify.register(sub)
    cli_rebuild.register(sub)
    cli_mcp.register(sub)
    cli_serve.register(sub)
    return parser


class _VersionAction(argparse.Action):
    """``--version``, looked up only when asked for (importlib.metadata costs ~20 ms)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, **kwargs):
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0,
                         help="show program's version number and exit", **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        sys.stdout.write(f"kbsync {_version()}\n")  # stdout and exit 0, as argparse's own
        parser.exit()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kbsync")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def _mqe(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 10:
        raise argparse.ArgumentTypeError("must be between 0 and 10")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code.

    Every failure ends here as one line on stderr (the traceback only under
    ``-v``) and, with ``--json``, one JSON object on stdout (see module doc).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    cli_support.reset_emitted()
    with cli_signals.handled():  # SIGTERM and SIGHUP end the command as Ctrl-C does
        return _main(argv)


def _main(argv: list[str]) -> int:
    args = settings = None
    try:
        args = build_parser().parse_args(argv)
        cli_support.setup_logging(args.verbose)
        if args.command in ("search", "ask", "stats"):  # KBSYNC_SERVER: the server answers
            client = cli_serve.remote_client()
            if client is not None:
                return cli_serve.run_remote(client, args)
        from kbsync.settings import load_settings

        configured = settings = load_settings()
        # rebuild reads the environment as written: it holds the new settings; mcp and serve
        # resolve on each call (they outlive a rebuild's swap). The others follow the active
        # collection; resolving it may reach the store, so it comes after the settings are
        # known (a failure then names KBSYNC_QDRANT_URL).
        if args.command not in UNRESOLVED:
            from kbsync.catalog.active import resolve

            settings = resolve(settings)
        command = {"ingest": _ingest, "search": _search, "stats": _stats,
                   **cli_ask.COMMANDS, **cli_eval.COMMANDS, **cli_remove.COMMANDS,
                   **cli_verify.COMMANDS, **cli_rebuild.COMMANDS,
                   **cli_mcp.COMMANDS, **cli_serve.COMMANDS}[args.command]
        if args.command in UNRESOLVED:
            return command(args, settings)
        from kbsync.catalog.active import resolved

        with resolved(configured, settings):  # the flow run in process takes this answer
            return command(args, settings)
    except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - one line, one object
        return _failed(exc, argv, args, settings)
    except BaseException as exc:  # noqa: BLE001 - an engine panic the adapter did not see
        if not cli_support.is_engine_panic(exc):
            raise
        return _failed(cli_support.panic_error(exc), argv, args, settings)


def _failed(exc: BaseException, argv: list[str], args, settings) -> int:
    """Report ``exc`` (one stderr line, the JSON object with ``--json``); its exit code."""
    log.debug("kbsync %s failed", getattr(args, "command", "?"), exc_info=exc)
    code, kind, message = cli_support.classify(exc, settings)
    cli_support.print_error(code, kind, message)
    # Before parsing succeeded only argv tells whether JSON was asked for.
    as_json = getattr(args, "json", False) if args is not None else "--json" in argv
    if as_json and not cli_support.emitted():
        command = getattr(args, "command", None) or next(
            (a for a in argv if not a.startswith("-")), None)
        fields = None
        try:
            fields = _ingest_counts(exc, args, settings) if command == "ingest" else None
        except Exception:  # noqa: BLE001 - the error object goes out even without counts
            log.debug("could not build the ingest counts", exc_info=True)
        cli_support.emit(cli_support.error_object(
            kind, message, fields, retry_after=getattr(exc, "retry_after", None)))
    return code


def _ingest_counts(exc: BaseException, args, settings) -> dict:
    """The counts a failed ingest reached (attached by the flow), else the summary's zeros."""
    from kbsync.ingest.summary import IngestSummary
    from kbsync.ingest.summary import counts_of

    counts = counts_of(exc)
    if counts is not None:
        return counts
    return IngestSummary(
        run_id="", namespace=getattr(args, "namespace", "default"),
        collection=(settings.collection if settings is not None
                    else os.environ.get("KBSYNC_COLLECTION", "kbsync")),
        mode=getattr(args, "mode", "incremental"),
        dry_run=getattr(args, "dry_run", False)).to_dict()


def _ingest(args, settings) -> int:
    from kbsync.app import cli_ingest

    return cli_ingest.ingest(args, settings, lambda exc: _failed(exc, [], args, settings))


def _search(args, settings) -> int:
    from kbsync.app.console import print_search
    from kbsync.query.llm import chat_model
    from kbsync.query.search import SearchResult, search

    request = cli_filters.request_of(args, args.query, mode=args.mode, mqe=args.mqe,
                                     hyde=args.hyde, min_score=args.min_score)
    llm = chat_model(settings, optional=True) if (request.mqe or request.hyde) else None
    store = cli_support.indexed_store(settings, request.namespace, named=True)
    if store is None:  # answered at once: no model loaded, no folder created
        result = SearchResult(query=request.query, namespace=request.namespace,
                              mode=request.mode.value, raw_count=0, kept_count=0,
                              notes=[cli_support.nothing_indexed(settings, request.namespace)],
                              filters=request.filters.to_dict())
    else:
        from kbsync.embed import build_embedding_service

        try:
            result = search(request, store=store, service=build_embedding_service(settings),
                            collection=settings.collection, llm=llm)
        finally:
            store.close()
    _emit(result.to_dict()) if args.json else print_search(result)
    return EXIT_OK


def _stats(args, settings) -> int:
    from kbsync.app.console import print_stats
    from kbsync.query.stats import collect_stats, empty_stats

    store = cli_support.indexed_store(settings)
    if store is None:
        data = empty_stats(settings, args.namespace)
    else:
        try:
            if args.namespace is not None:
                cli_support.check_namespace(store, settings, args.namespace)
            data = collect_stats(store, settings, args.namespace, as_user=args.as_user)
        finally:
            store.close()
    if args.json:
        _emit(data)
    elif store is None:
        from kbsync.app.console import out

        out.print(cli_support.nothing_indexed(settings), highlight=False, markup=False,
                  soft_wrap=True)
    else:
        print_stats(data)
    return EXIT_OK


def _emit(obj: dict) -> None:
    cli_support.emit(obj)


if __name__ == "__main__":
    sys.exit(main())
