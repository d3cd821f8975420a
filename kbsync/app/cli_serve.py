"""``kbsync serve`` and the remote path of ``kbsync search/ask/stats`` (issue 40).

``kbsync serve`` answers other users' searches through the one permission filter
(:mod:`kbsync.serve`; docs/serving.md). With ``KBSYNC_SERVER`` set, ``search``, ``ask``
and ``stats`` send their request to that server instead of opening the store
(:func:`run_remote`): the same output, ``--json`` included, answered as the user the
server authenticates (so ``--as-user`` is refused there).
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import sys
import threading

from kbsync.app import cli_support
from kbsync.errors import UsageError

log = logging.getLogger("kbsync.serve.cli")  # the server's lines: shown at INFO (_log_to_stderr)


def _mode(text: str) -> int:
    try:
        value = int(text, 8)
    except ValueError:
        raise argparse.ArgumentTypeError("an octal mode, e.g. 0660") from None
    if not 0 <= value <= 0o777:
        raise argparse.ArgumentTypeError("an octal mode between 0 and 0777")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def register(sub) -> None:
    """Add ``serve`` to the ``kbsync`` subparsers."""
    srv = sub.add_parser(
        "serve", help="answer other users' search, ask and stats through the permission "
                      "filter, on a Unix socket and/or HTTP (see docs/serving.md)")
    srv.add_argument("--socket", metavar="PATH", default=None,
                     help="listen on this Unix socket; the kernel names each caller "
                          "(SO_PEERCRED), and that user's view is what they get")
    srv.add_argument("--socket-mode", type=_mode, default=0o660, metavar="MODE",
                     help="the socket file's mode: who may connect at all (default 0660)")
    srv.add_argument("--socket-group", default=None, metavar="GROUP",
                     help="the socket file's group (e.g. kbsync-readers)")
    srv.add_argument("--http", default=None, metavar="HOST:PORT",
                     help="also serve HTTP on this address (needs --tokens; TLS: a reverse proxy)")
    srv.add_argument("--tokens", default=None, metavar="FILE",
                     help="bearer tokens for HTTP, lines 'USER sha256:HEX', a file only "
                          "the owner may read")
    srv.add_argument("--hash-token", action="store_true",
                     help="read a token on stdin, print its 'sha256:HEX' line for --tokens, exit")
    srv.add_argument("--max-per-caller", type=_positive, default=4, metavar="N",
                     help="requests one caller may have in flight (default 4)")
    srv.add_argument("--idle-timeout", type=float, default=30.0, metavar="S",
                     help="close a connection that sends nothing for S seconds (default 30)")
    srv.add_argument("--log-queries", action="store_true",
                     default=os.environ.get("KBSYNC_SERVE_LOG_QUERIES", "") in ("1", "true"),
                     help="put the query text in the access log (default off; "
                          "KBSYNC_SERVE_LOG_QUERIES=1)")


def hash_token(token: str) -> str:
    """The stored form of a bearer token: ``sha256:`` and its hex digest."""
    return "sha256:" + hashlib.sha256(token.strip().encode("utf-8")).hexdigest()


def run_serve(args, settings) -> int:
    """``kbsync serve``: until SIGTERM (or Ctrl-C), which drains the requests in flight."""
    if args.hash_token:
        token = sys.stdin.readline().strip()
        if not token:
            raise UsageError("--hash-token: give the token on stdin")
        sys.stdout.write(hash_token(token) + "\n")
        return 0
    if args.socket is None and args.http is None:
        raise UsageError("serve: give --socket PATH, --http HOST:PORT, or both")
    if args.http is not None and args.tokens is None:
        raise UsageError("serve --http needs --tokens FILE: there is no anonymous reader")
    from kbsync.serve.handler import Handler

    _log_to_stderr(args.verbose)
    handler = Handler(settings, max_per_caller=args.max_per_caller)
    doors: list = []  # HttpServer, UnixServer: start() and stop()
    stop = threading.Event()
    try:
        if args.http is not None:
            from kbsync.serve.http import HttpServer, load_tokens

            doors.append(HttpServer(handler, args.http, load_tokens(args.tokens),
                                    log_queries=args.log_queries))
        if args.socket is not None:
            from pathlib import Path

            from kbsync.serve.unix import UnixServer

            doors.append(UnixServer(handler, Path(args.socket), mode=args.socket_mode,
                                    group=args.socket_group, idle_timeout_s=args.idle_timeout,
                                    log_queries=args.log_queries))
        for door in doors:
            door.start()
        log.info("kbsync serve ready (pid %d)", os.getpid())
        stop.wait()
    except KeyboardInterrupt as exc:  # SIGTERM, SIGHUP, Ctrl-C: drain, then a normal exit
        log.info("stopping (%s): finishing the requests in flight", exc or "interrupted")
    finally:
        for door in doors:
            door.stop()
        handler.close()
    log.info("kbsync serve stopped")
    return 0


def _log_to_stderr(verbose: bool) -> None:
    """The server's own lines (access log, hand-overs) at INFO on stderr, with a timestamp."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for name in ("kbsync.serve", "kbsync.store.edge"):  # requests, and the store's hand-overs
        logger = logging.getLogger(name)
        logger.setLevel(logging.DEBUG if verbose else logging.INFO)
        if not verbose:  # else the root handler shows everything already
            logger.addHandler(handler)
            logger.propagate = False


# --- the client side: search, ask, stats through KBSYNC_SERVER --------------------------------
def remote_client():
    """The client ``KBSYNC_SERVER`` names, or ``None`` (read before any settings)."""
    if not os.environ.get("KBSYNC_SERVER"):
        return None
    from kbsync.serve.client import connect_from_env

    return connect_from_env()


def run_remote(client, args) -> int:
    """``kbsync search/ask/stats`` answered by the server (same output as in process)."""
    if getattr(args, "as_user", None) is not None:
        raise UsageError("--as-user is not available through KBSYNC_SERVER: the server "
                         "answers as the user it authenticates (unset KBSYNC_SERVER to search "
                         "a store of your own)")
    try:
        if args.command == "stats":
            data = client.stats({"namespace": args.namespace})
        else:
            request = _request_args(args)
            data = client.search(request) if args.command == "search" else client.ask(request)
    finally:
        client.close()
    if args.json:
        cli_support.emit(data)
    else:
        _print(args.command, data)
    return 0


def _request_args(args) -> dict:
    types = [t for group in args.types for t in group] if args.types else None
    since = args.modified_since
    request = {"query": args.query if args.command == "search" else args.question,
               "namespace": args.namespace, "k": args.k, "min_score": args.min_score,
               "root": args.root, "path_prefix": args.path_prefix, "types": types,
               "modified_since": since.isoformat() if since is not None else None}
    if args.command == "search":
        request.update(mode=args.mode, mqe=args.mqe or None, hyde=args.hyde or None)
    return request


def _print(command: str, data: dict) -> None:
    from kbsync.models import SearchHit

    hits = [SearchHit(**h) for h in data.get("results", [])]
    if command == "search":
        from kbsync.app.console import print_search
        from kbsync.query.search import SearchResult

        print_search(SearchResult(**{**data, "results": hits}))
    elif command == "ask":
        from kbsync.app.cli_ask import _print_answer
        from kbsync.query.answer import Answer, Citation

        _print_answer(Answer(**{**data, "results": hits,
                                "citations": [Citation(**c) for c in data["citations"]]}))
    else:
        from kbsync.app.console import print_stats

        print_stats(data)


COMMANDS = {"serve": run_serve}
