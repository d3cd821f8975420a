"""Contextual text (KBSYNC_CONTEXTUAL_TEXT): title and heading path are indexed, not stored.

Real parts: the plain run over a small share, the hash embedder, the embedded store.
A word that appears only in a document's first heading must find that document's
later sections through the sparse side when the setting is on, and not when it is
off; the stored text is the chunk's own either way; the dense vector is that of the
contextual text; a heal rebuilds the same text from the payload; and flipping the
setting changes the fingerprint, so the next run reprocesses every document.
"""

from __future__ import annotations

import math
from dataclasses import replace

from kbsync.runtime import Runtime
from kbsync.embed.base import TextKind
from kbsync.embed.hash import HashEmbedder
from kbsync.ingest.runner import run_plain
from kbsync.ingest.write import heal_document
from kbsync.models import RootSpec
from kbsync.text.context import MAX_PREFIX_CHARS, context_prefix, contextual_text
from kbsync.text.sparse import encode_query
from kbsync.ingest.discover import discover, parse_root
from kbtest import write_tree

DOC = ("# Zanzibarian handbook\n\nWhat this handbook is for.\n\n"
       "## Setup\n\nInstall the agent on every host.\n\n"
       "## Trouble\n\nErrors and their fixes, one by one.")


def test_prefix_is_title_then_headings_without_saying_the_title_twice():
    assert context_prefix("Guide", "Guide > Setup > Linux") == "Guide > Setup > Linux"
    assert context_prefix("The guide", "Setup > Linux") == "The guide > Setup > Linux"
    assert context_prefix("", "Setup") == "Setup"
    assert contextual_text("body", title="", heading_path="") == "body"
    assert contextual_text("body", title="T", heading_path="T > S") == "T > S\n\nbody"
    assert len(context_prefix("t" * 1000, "")) <= MAX_PREFIX_CHARS + 1


def _open(settings, contextual: bool) -> Runtime:
    return Runtime.open(settings.model_copy(update={"contextual_text": contextual,
                                                    "chunk_tokens": 16}))


def _ingest(rt: Runtime, share):
    return run_plain([RootSpec(name="share", path=share)], runtime=rt)


def _sparse_docs(rt: Runtime, word: str) -> list[tuple[str, int]]:
    points = rt.store.sparse_search(rt.collection, encode_query(word), limit=10)
    return sorted((p.payload["doc_id"], p.payload["chunk_index"]) for p in points)


def _cosine(a, b) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def test_title_and_headings_are_indexed_while_the_stored_text_stays_the_chunks(
        tmp_path, settings):
    share = tmp_path / "share"
    write_tree(share, {"guide.md": DOC})
    rt = _open(settings, contextual=False)
    try:
        _ingest(rt, share)
        plain = {p.payload["chunk_index"]: p.payload["text"]
                 for p in rt.store.scroll(rt.collection)}
        assert len(plain) >= 3 and "Zanzibarian" not in plain[max(plain)]
        assert _sparse_docs(rt, "Zanzibarian") == [("share/guide.md", 0)]
        off = rt.fingerprint
    finally:
        rt.close()

    rt = _open(settings, contextual=True)
    try:
        assert rt.fingerprint != off
        summary = _ingest(rt, share)
        assert summary.updated == 1  # the new fingerprint reprocessed the document
        points = list(rt.store.scroll(rt.collection, with_vectors=True))
        assert {p.payload["chunk_index"]: p.payload["text"] for p in points} == plain
        assert _sparse_docs(rt, "Zanzibarian") == [("share/guide.md", i) for i in sorted(plain)]
        hasher = HashEmbedder(dimension=rt.service.dimension)
        for p in points:
            expected = contextual_text(p.payload["text"], title=p.payload["title"],
                                       heading_path=p.payload["heading_path"])
            assert expected != p.payload["text"]
            [vector] = hasher.embed_batch([expected], TextKind.PASSAGE)
            assert _cosine(p.vector, vector) > 1 - 1e-6
    finally:
        rt.close()


def test_a_heal_indexes_the_same_contextual_text_as_a_fresh_write(tmp_path, settings):
    share = tmp_path / "share"
    write_tree(share, {"guide.md": DOC})
    rt = _open(settings, contextual=True)
    try:
        _ingest(rt, share)
        fresh = {p.id: p.vector for p in rt.store.scroll(rt.collection, with_vectors=True)}
        # Flag every point as a zero-vector fallback, as a failed embedding leaves it.
        flagged = [replace(p, payload={**p.payload, "embedding_failed": True},
                           vector=[0.0] * len(p.vector))
                   for p in rt.store.scroll(rt.collection, with_vectors=True)]
        rt.store.upsert(rt.collection, flagged)
        files = discover(parse_root(str(share))).files
        previous = rt.states.load("default")["share/guide.md"]
        [source] = [f for f in files if f.doc_id == "share/guide.md"]
        heal_document(source, previous, store=rt.store, states=rt.states, service=rt.service,
                      collection=rt.collection, namespace="default", run_id="heal", sparse=rt.sparse,
                      contextual=True)
        healed = {p.id: p.vector for p in rt.store.scroll(rt.collection, with_vectors=True)}
        assert healed.keys() == fresh.keys()
        assert all(_cosine(healed[i], fresh[i]) > 1 - 1e-6 for i in fresh)
        assert _sparse_docs(rt, "Zanzibarian") == sorted(
            ("share/guide.md", i) for i in range(len(fresh)))
    finally:
        rt.close()


class WordFit:
    """A model that reads ``limit`` whitespace-separated words (a real, tiny InputFit)."""

    name, limit = "words/40", 40

    def count(self, texts):
        return [len(t.split()) for t in texts]


def test_a_contextual_fit_keeps_the_prefixed_chunk_within_the_models_limit():
    from kbsync.models import Document
    from kbsync.text.chunk import chunk_budget, chunk_document

    title = "A rather long document title that says what all of this is about"
    body = " ".join(f"word{i}." for i in range(300))
    doc = Document(doc_id="d", path="d.md", markdown=f"# {title}\n\n## Section two\n\n{body}\n",
                   title=title, source_type="markdown", converter="markdown")
    fit = WordFit()
    for contextual in (False, True):
        chunks = chunk_document(doc, chunk_budget(fit, contextual=contextual,
                                                  fit_chunks=True)).chunks
        read = fit.count([contextual_text(c.text, title=title, heading_path=c.heading_path)
                          for c in chunks])
        assert (max(read) <= fit.limit) is contextual, (contextual, read)
