"""Readable terminal output (rich) for the CLI.

Invariant: nothing printed through :data:`out` or :data:`err` reaches the
terminal with a control character from the data (a render hook passes every
text segment through :func:`~kbsync.app.terminal.terminal_safe`; rich's own
styling is added after it). Data put inside markup is also ``escape``d, so a
name like ``[/]`` or ``[link=...]`` prints as itself instead of as markup.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

from rich.console import Console, ConsoleOptions, RenderableType, RenderHook, RenderResult
from rich.markup import escape
from rich.segment import Segment
from rich.table import Table

from kbsync.app.terminal import terminal_safe

from kbsync.ingest.progress import Progress, listening
from kbsync.ingest.report import ignored_line, shown_fields
if TYPE_CHECKING:  # the query wing's import is paid by the commands that print hits only
    from kbsync.query.search import SearchResult



class _Sanitized:
    """A renderable shown with control characters of its text escaped."""

    def __init__(self, inner: RenderableType) -> None:
        self.inner = inner

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for segment in console.render(self.inner, options):
            if segment.control or segment.text.isprintable() or segment.text == "\n":
                yield segment
            else:
                yield Segment(terminal_safe(segment.text), segment.style)


class _EscapeControls(RenderHook):
    def process_renderables(self, renderables: list) -> list:
        return [_Sanitized(r) for r in renderables]


def _console(**options) -> Console:
    console = Console(**options)
    console.push_render_hook(_EscapeControls())
    return console


out = _console()
err = _console(stderr=True)


def labelled(style: str, label: str, text: str) -> str:
    """``[style]label[/style] text`` as markup, ``text`` taken literally (a warning naming
    a file)."""
    return f"[{style}]{label}[/{style}] {escape(terminal_safe(text, one_line=True))}"


INGEST_STATUS = "kbsync: ingesting (Prefect flow running)..."


@contextmanager
def ingest_status(enabled: bool) -> Iterator[None]:
    """A spinner on stderr while the flow runs; on a terminal its line follows the run's
    progress (:mod:`kbsync.ingest.progress`, :func:`progress_line`) as batches finish.

    Elsewhere (stderr not a terminal) the spinner is transient and prints nothing, as before.
    """
    if not enabled:
        yield
        return
    with err.status(INGEST_STATUS) as status:
        if not err.is_terminal:
            yield
            return
        began: list[float] = []

        def show(progress: Progress) -> None:
            now = time.monotonic()
            began[:] = began or [now]  # from the first plan: Prefect's start is not work
            status.update(progress_line(progress, now - began[0]))

        with listening(show):
            yield


def progress_line(progress: Progress, elapsed_s: float) -> str:
    """``kbsync: ingesting 96/400 files, 1,234 chunks embedded, ETA 0:42`` (``/400+`` while
    more is to be planned; the ETA once a batch is done, at the rate so far)."""
    more = "" if progress.complete else "+"
    line = (f"kbsync: ingesting {progress.files_done}/{progress.files_planned}{more} files, "
            f"{progress.chunks_embedded:,} chunks embedded")
    left = progress.files_planned - progress.files_done
    if progress.files_done and left > 0:
        eta = round(elapsed_s / progress.files_done * left)
        line += f", ETA {eta // 60}:{eta % 60:02d}"
    elif not left and progress.complete:
        line += ", finishing"
    return line


def print_ingest(summary: dict) -> None:
    """The ingest summary as a table, then failures and warnings."""
    table = Table(title=f"kbsync ingest: namespace {summary['namespace']} "
                        f"({'dry run, ' if summary['dry_run'] else ''}{summary['mode']})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name in shown_fields(summary):
        table.add_row(name, str(summary[name]))
    out.print(table)
    if ignored_line(summary):
        out.print(f"{ignored_line(summary)} (unsupported types; see docs/formats.md)",
                  highlight=False, markup=False)
    for failure in summary["failures"]:
        out.print(labelled("red", "failed", f"{failure['doc_id']}: {failure['error']}: "
                                             f"{failure['message']}"), highlight=False)
    for warning in summary.get("warnings", []):
        out.print(labelled("yellow", "warning", warning), highlight=False)


def print_search(result: SearchResult) -> None:
    """Hits with their citations and a text excerpt, then expansions and notes."""
    from kbsync.query.search import citation

    out.print(f"{result.kept_count} kept of {result.raw_count} candidates for "
              f"{result.query!r} in namespace {result.namespace} ({result.latency_ms} ms)",
              highlight=False)
    for hit in result.results:
        excerpt = " ".join(hit.text.split())[:240]
        shown = escape(terminal_safe(citation(hit), one_line=True))  # a name is one line
        out.print(f"[bold]{shown}[/bold]  score {hit.score:.3f}", highlight=False)
        out.print(f"    {excerpt}", highlight=False, markup=False)
    for text in result.expansions:
        out.print(f"  also searched: {' '.join(text.split())[:160]}", highlight=False,
                  markup=False)
    for note in result.notes:
        out.print(f"  note: {note}", highlight=False, markup=False)


def print_stats(data: dict) -> None:
    """Per-namespace documents, chunks and failed embeddings."""
    emb = data["embedding"]
    table = Table(title=f"collection {data['collection']}: {emb['provider']} {emb['model']} "
                        f"dim {emb['dimension']}")
    for column in ("namespace", "documents", "chunks", "failed_embeddings"):
        table.add_column(column, justify="left" if column == "namespace" else "right")
    for ns, info in data["namespaces"].items():
        table.add_row(ns, str(info["documents"]), str(info["chunks"]),
                      str(info["failed_embeddings"]))
    out.print(table)
    configured = data.get("configured_embedding")
    if configured:
        out.print(labelled("yellow", "note", f"configured embedder {configured['provider']} "
                           f"{configured['model']} differs: search and ingest refuse it"),
                  highlight=False)
