"""The ``ask`` subcommand of ``kbsync`` (wired in by :mod:`kbsync.app.cli`).

``kbsync ask`` runs in-process (no Prefect) and exits 0 also when nothing
relevant was found (``answered`` is false in the JSON object).
"""

from __future__ import annotations

from kbsync.app import cli_filters, cli_support
from kbsync.app.cli_support import (
    k_argument,
    namespace_argument,
    score_argument,
    text_argument,
)


def register(sub) -> None:
    """Add ``ask`` to the ``kbsync`` subparsers."""
    ask = sub.add_parser("ask", help="answer a question from the knowledge base, with citations "
                                     "(needs KBSYNC_LLM_*)")
    ask.add_argument("question", metavar="QUESTION", type=text_argument)
    ask.add_argument("--namespace", type=namespace_argument, default="default", metavar="NS",
                     help="namespace searched for the answer (default: default; `kbsync stats` "
                          "lists them)")
    ask.add_argument("-k", type=k_argument, default=5, help="chunks retrieved (default 5)")
    ask.add_argument("--min-score", type=score_argument, default=None, metavar="S",
                     help="ignore chunks scoring below S; nothing above it = no answer "
                          "(default 0.3)")
    ask.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    cli_filters.register(ask)


def run_ask(args, settings) -> int:
    """``kbsync ask``: exit 0 also when nothing relevant was found (``answered`` is false)."""
    from kbsync.query.answer import DEFAULT_MIN_SCORE, ask
    from kbsync.query.llm import chat_model

    llm = chat_model(settings)  # a missing configuration fails before any search
    request = cli_filters.request_of(
        args, args.question,
        min_score=DEFAULT_MIN_SCORE if args.min_score is None else args.min_score)
    store = cli_support.indexed_store(settings, request.namespace, named=True)
    if store is None:  # answered at once, without the model or the chat model
        answer = _nothing_indexed(request, settings)
    else:
        from kbsync.embed import build_embedding_service

        try:
            answer = ask(request, store=store, service=build_embedding_service(settings),
                         collection=settings.collection, llm=llm)
        finally:
            store.close()
    if args.json:
        cli_support.emit(answer.to_dict())
    else:
        _print_answer(answer)
    return 0


def _nothing_indexed(request, settings):
    from kbsync.query.answer import Answer

    message = cli_support.nothing_indexed(settings, request.namespace)
    return Answer(query=request.query, namespace=request.namespace, mode="dense",
                  answer=message, answered=False, citations=[], raw_count=0, kept_count=0,
                  results=[], latency_ms=0.0, min_score=request.min_score,
                  filters=request.filters.to_dict())


def _print_answer(answer) -> None:
    from kbsync.app.console import labelled, out

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
        out.print(labelled("yellow", "warning", warning), highlight=False)


COMMANDS = {"ask": run_ask}
"""Subcommand name -> handler ``(args, settings) -> exit code``, merged into cli.main's table."""
