"""The readable text block of each MCP tool's reply, made from the ``--json`` objects (the same
dicts whether read in process or from ``kbsync serve``). Citations read as the CLI's do:
``[n] doc_id, p. 3-4, "Heading > Sub"`` (:func:`kbsync.query.search.citation`)."""

from __future__ import annotations

from typing import Any


def cite(item: dict[str, Any], n: int) -> str:
    """``[n] doc_id, p. 3-4, "Heading"`` of a hit or a citation (page and heading when known)."""
    parts = [f"[{n}] {item.get('doc_id', '?')}"]
    start, end = item.get("page_start"), item.get("page_end")
    if start is not None:
        parts.append(f"p. {start}" if end in (None, start) else f"p. {start}-{end}")
    if item.get("heading_path"):
        parts.append(f'"{item["heading_path"]}"')
    return ", ".join(parts)


def _notes(data: dict[str, Any]) -> list[str]:
    return [f"note: {note}" for note in data.get("notes", [])] + [
        f"warning: {warning}" for warning in data.get("warnings", [])]


def search_text(data: dict[str, Any]) -> str:
    """The hits, best first: citation, score, path, then the passage."""
    results = data.get("results", [])
    head = (f"{len(results)} passage{'s' if len(results) != 1 else ''} for "
            f"{data.get('query', '')!r} in namespace {data.get('namespace', '')!r} "
            f"({data.get('mode', '')}):")
    blocks = [head]
    for hit in results:
        blocks.append(f"{cite(hit, hit.get('rank', 0))}  (score {hit.get('score', 0.0):.3f}; "
                      f"path {hit.get('path', '')})\n{hit.get('text', '').strip()}")
    if not results:
        blocks.append("Nothing matched: try other words, mode 'hybrid', or fewer filters.")
    blocks.extend(_notes(data))
    return "\n\n".join(blocks)


def answer_text(data: dict[str, Any]) -> str:
    """The answer, then its sources."""
    blocks = [str(data.get("answer", "")).strip()]
    citations = data.get("citations", [])
    if citations:
        blocks.append("Sources:\n" + "\n".join(cite(c, c.get("n", 0)) for c in citations))
    blocks.extend(_notes(data))
    return "\n\n".join(blocks)


def namespaces_text(data: dict[str, Any]) -> str:
    """One line per namespace the reader can see, with the reader's counts."""
    namespaces = data.get("namespaces", {})
    if not namespaces:
        return (f"No namespace you can read is indexed in collection "
                f"{data.get('collection', '')!r} yet.")
    lines = [f"Namespaces you can read in collection {data.get('collection', '')!r}:"]
    for name, counts in namespaces.items():
        failed = counts.get("failed_embeddings", 0)
        lines.append(f"- {name}: {counts.get('documents', 0)} documents, "
                     f"{counts.get('chunks', 0)} chunks"
                     + (f", {failed} failed embeddings" if failed else ""))
    return "\n".join(lines)
