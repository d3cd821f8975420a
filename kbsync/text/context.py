"""Contextual text: what a chunk is *indexed* as (embedded and BM25-encoded).

A chunk cut from the middle of a long section loses the words that say what it is
about: the document's title and the headings above it. :func:`contextual_text`
puts them back in front of the chunk's text for the two encoders (the dense
embedding and the sparse BM25 vector), while the stored and returned ``text``
stays the chunk's own, so citations, snippets and point ids do not change.

Invariants and limits:

- a pure function of (title, heading path, text): the ingest (``embed_stage``,
  ``build_points``) and the heal path (``heal_document``, from the stored payload)
  compute the same string, so a healed point gets the vector a fresh one would;
- the prefix is bounded (:data:`MAX_PREFIX_CHARS`): it costs at most that much of
  the model's input window, so a chunk fitted to the window is cut by at most the
  prefix's length at its tail (counted as ``embeddings_truncated``);
- the heading path's leading headings equal to the title are dropped (a Markdown
  file's ``# Title`` is usually both), so nothing is said twice;
- no title and no heading path: the text is returned unchanged.

Changing the format changes every stored vector: bump :data:`CONTEXT_VERSION`
(it is part of the store fingerprint, so the next run reprocesses).
"""

from __future__ import annotations

CONTEXT_VERSION = "ctx1"
MAX_PREFIX_CHARS = 240
_SEP = " > "


def context_prefix(title: str, heading_path: str) -> str:
    """``title > heading > subheading`` (bounded), or ``""`` when there is neither."""
    title = " ".join((title or "").split())
    heads = [h for h in (heading_path or "").split(_SEP) if h.strip()]
    while heads and title and heads[0].strip().casefold() == title.casefold():
        heads.pop(0)
    prefix = _SEP.join([title, *heads] if title else heads)
    if len(prefix) > MAX_PREFIX_CHARS:
        prefix = prefix[:MAX_PREFIX_CHARS].rstrip() + "…"
    return prefix


def contextual_text(text: str, *, title: str, heading_path: str) -> str:
    """The chunk's text with its title and heading path in front (see the module doc)."""
    prefix = context_prefix(title, heading_path)
    return f"{prefix}\n\n{text}" if prefix else text
