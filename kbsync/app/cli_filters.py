"""The query-time filter options of ``kbsync search``, ``ask`` and ``eval``.

Each value is checked while the arguments are parsed, so a bad one is the usual
one-line usage error (exit 2) before any store is opened; the parsed values go
to :class:`kbsync.query.filters.SearchFilters` unchanged, and with the command's other
options into one :class:`kbsync.query.request.SearchRequest` (:func:`request_of`).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from kbsync.errors import UsageError

if TYPE_CHECKING:  # the types only: `--help` must not import the query wing (TYPES_HELP)
    from kbsync.query.filters import SearchFilters
    from kbsync.query.request import SearchRequest

TYPES_HELP = "pdf, html, docx, xlsx, pptx, csv, markdown, text, json, code, image"
"""``kbsync.query.filters.SOURCE_TYPES`` spelled out: ``--help`` must not import the query
wing (tests/app/test_cli_startup.py); tests/query/test_filters.py keeps the two equal."""


def _checked(name: str):
    """An argparse ``type`` from the parser ``name`` of :mod:`kbsync.query.filters`."""
    def check(text: str):
        from kbsync.query import filters as qf  # late: see TYPES_HELP

        try:
            return getattr(qf, name)(text)
        except UsageError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    check.__name__ = name  # argparse names the type in some messages
    return check


def register(parser: argparse.ArgumentParser, *, reader: bool = True) -> None:
    """Add ``--root``, ``--path-prefix``, ``--type`` and ``--modified-since`` to ``parser``,
    and ``--as-user`` with ``reader``."""
    group = parser.add_argument_group(
        "filters", "narrow the namespace (all given filters must hold; chunks ingested before "
                   "these filters existed lack folders and dates until re-ingested)")
    group.add_argument("--root", type=_checked("parse_root"), default=None, metavar="NAME",
                       help="only documents of this root (the NAME of `kbsync ingest NAME=PATH`)")
    group.add_argument("--path-prefix", type=_checked("parse_path_prefix"), default=None,
                       metavar="P", help="only documents under this folder, relative to the "
                                         "root (e.g. docs/api; whole folder names)")
    group.add_argument("--type", dest="types", action="append", type=_checked("parse_types"),
                       default=None, metavar="T1,T2",
                       help=f"only these file types ({TYPES_HELP}; md, htm, txt "
                            "accepted; repeatable)")
    group.add_argument("--modified-since", type=_checked("parse_since"), default=None,
                       metavar="DATE", help="only files modified at or after DATE (ISO date or "
                                            "datetime, e.g. 2024-05-01; no timezone = UTC)")
    if reader:
        register_reader(parser)


def register_reader(parser: argparse.ArgumentParser) -> None:
    """Add ``--as-user``: see what another user may read (docs/permissions.md)."""
    parser.add_argument("--as-user", default=None, metavar="USER",
                        help="answer as USER (a name or uid) would be answered: only documents "
                             "USER may read on the share, as the kernel decides (never more "
                             "than this process may read)")


def filters_of(args: Any) -> SearchFilters:
    """The parsed filter options as the query side's filters."""
    from kbsync.query.filters import SearchFilters

    types = [t for group in args.types for t in group] if args.types else None
    return SearchFilters.build(root=args.root, path_prefix=args.path_prefix, types=types,
                               modified_since=args.modified_since)


def request_of(args: Any, query: str, **options: Any) -> SearchRequest:
    """The search a command's ``args`` ask for: ``query`` in ``--namespace``, ``-k`` results,
    with the filters; ``options`` are the request's fields only some commands have
    (``mode``, ``mqe``, ``hyde``, ``min_score``)."""
    from kbsync.query.request import SearchRequest

    return SearchRequest(query=query, namespace=args.namespace, k=args.k,
                         filters=filters_of(args), as_user=getattr(args, "as_user", None),
                         **options)
