"""Readable terminal output (rich) for the CLI."""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from typing import Iterator

from rich.console import Console
from rich.table import Table

from kbsync.ingest.report import shown_fields
from kbsync.query.search import SearchResult, citation

out = Console()
err = Console(stderr=True)


@contextmanager
def ingest_status(enabled: bool) -> Iterator[None]:
    """A spinner on stderr while the flow runs (the flow logs batch progress)."""
    with err.status("kbsync: ingesting (Prefect flow running)...") if enabled else nullcontext():
        yield


def print_ingest(summary: dict) -> None:
    """The ingest summary as a table, then failures and warnings."""
    table = Table(title=f"kbsync ingest: namespace {summary['namespace']} "
                        f"({'dry run, ' if summary['dry_run'] else ''}{summary['mode']})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name in shown_fields(summary):
        table.add_row(name, str(summary[name]))
    out.print(table)
    for failure in summary["failures"]:
        out.print(f"[red]failed[/red] {failure['doc_id']}: {failure['error']}: "
                  f"{failure['message']}", markup=True, highlight=False)
    for warning in summary.get("warnings", []):
        out.print(f"[yellow]warning[/yellow] {warning}", highlight=False)


def print_search(result: SearchResult) -> None:
    """Hits with their citations and a text excerpt, then expansions and notes."""
    out.print(f"{result.kept_count} kept of {result.raw_count} candidates for "
              f"{result.query!r} in namespace {result.namespace} ({result.latency_ms} ms)",
              highlight=False)
    for hit in result.results:
        excerpt = " ".join(hit.text.split())[:240]
        out.print(f"[bold]{citation(hit)}[/bold]  score {hit.score:.3f}", highlight=False)
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
        out.print(f"[yellow]note[/yellow] configured embedder {configured['provider']} "
                  f"{configured['model']} differs: search and ingest refuse it", highlight=False)
