"""kbsync.ingest.stages, stage by stage: what goes on, what fails (once, in one line), what is counted.

Real parts throughout: files planned by :func:`plan_files`, the real converters and
chunker, the hash embedder under the real :class:`EmbeddingService`, the embedded store
of the ``runtime`` fixture. Faults come in at the provider (the vendor's side of the
service) or at the convert stage's ``converter`` seam, as in ``test_containment.py``,
which covers the same containment through the whole plain run.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from dataclasses import replace

import pymupdf
import pytest

from kbsync.embed.base import TextKind
from kbsync.embed.hash import HashEmbedder
from kbsync.embed.service import EmbeddingService
from kbsync.errors import EmbeddingPermanentError, EmbeddingTransientError
from kbsync.ingest.discover import discover, parse_root
from kbsync.ingest.stages import (RUN_LEVEL_ERRORS, StageResult, chunk_stage, convert_stage,
                                  embed_stage, failure_of, heal_stage, merge, write_stage)
from kbsync.ingest.classify import plan_files
from kbsync.models import DocStatus, Failure, PlanAction
from kbsync.store.base import Filter
from kbsync.text.chunk import ChunkConfig
from kbtest import write_tree

MAX_BYTES = 10_000
TWO_SECTIONS = ("# Guide\n\n## Setup\n\nInstall the agent on every host.\n\n"
                "## Trouble\n\nFLAKY section about errors and their fixes.")


class Faulty:
    """The real hash embedder, except that a batch holding ``marker`` raises ``error``
    while ``broken`` (a 503, a vendor library's bug, a refused key)."""

    def __init__(self, error: Exception, marker: str = "FLAKY") -> None:
        self.inner = HashEmbedder(dimension=384)
        self.provider, self.model, self.dimension = "hash", self.inner.model, 384
        self.error, self.marker, self.broken, self.calls = error, marker, True, 0

    def embed_batch(self, texts, kind: TextKind):
        self.calls += 1
        if self.broken and any(self.marker in t for t in texts):
            raise self.error
        return self.inner.embed_batch(texts, kind)


def faulty_service(error: Exception) -> tuple[EmbeddingService, Faulty]:
    """One text per request, one attempt, no waiting: a failing chunk fails alone."""
    provider = Faulty(error)
    return EmbeddingService(provider, cache=None, batch_size=1, max_attempts=1,
                            sleep=lambda _s: None, fail_fast_after=0), provider


def new_items(share):
    """The plan items of ``share`` against no record (every file new): no store needed."""
    return plan_files(discover(parse_root(str(share))).files, {}, fingerprint="f").items


def plan(runtime, share):
    """The plan of ``share`` against the runtime's records, as an ingest makes it."""
    files = discover(parse_root(str(share))).files
    return plan_files(files, runtime.states.load("default"), fingerprint=runtime.fingerprint)


def embedded(runtime, share) -> StageResult:
    """Plan, convert, chunk and embed ``share``'s new and changed files (asserting no failure)."""
    planned = plan(runtime, share)
    items = planned.of(PlanAction.NEW) + planned.of(PlanAction.CHANGED)
    converted = convert_stage(items, max_bytes=MAX_BYTES)
    chunked = chunk_stage(converted.work, config=runtime.chunk_config)
    assert converted.failures == chunked.failures == []
    return embed_stage(chunked.work, service=runtime.service)


def one_line(failures: list[Failure]) -> bool:
    return all(f.message and "\n" not in f.message for f in failures)


@pytest.fixture
def rt(runtime):
    """The hash-embedder runtime with its chunk collection created, as a run starts."""
    runtime.ensure_collection()
    return runtime


# -- convert -------------------------------------------------------------------------------------
def test_convert_keeps_good_files_and_fails_each_bad_one_once(tmp_path):
    share = tmp_path / "share"
    write_tree(share, {"a.md": "# Alpha\n\nalpha text", "notes.txt": "plain notes",
                       "t.csv": "name,value\nx,1\n", "blank.md": "  \n\n ",
                       "big.txt": "word " * 2_500, "bad.pdf": "not a pdf at all"})
    (share / "bin.docx").write_bytes(b"\xff\xfe\x00 not a zip")
    result = convert_stage(new_items(share), max_bytes=MAX_BYTES)
    assert [(w.source.doc_id, w.title, w.source_type) for w in result.work] == [
        ("share/a.md", "Alpha", "markdown"), ("share/notes.txt", "notes", "text"),
        ("share/t.csv", "t", "csv")]
    assert all(w.document is not None and w.document.markdown for w in result.work)
    assert sorted((f.doc_id, f.error) for f in result.failures) == [
        ("share/bad.pdf", "CorruptDocument"), ("share/big.txt", "FileTooLarge"),
        ("share/bin.docx", "CorruptDocument"), ("share/blank.md", "EmptyDocument")]
    assert one_line(result.failures)
    assert dict(result.counters) == {"converter_warnings": 0}


def test_converter_warnings_are_counted(tmp_path):
    share = tmp_path / "share"
    share.mkdir()
    pdf = pymupdf.open()
    pdf.new_page().insert_text((72, 72), "Chapter 1: the only page with text", fontsize=12)
    pix = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, 32, 32), False)
    pix.set_rect(pix.irect, (120, 160, 200))
    pdf.new_page().insert_image(pymupdf.Rect(72, 72, 300, 300), pixmap=pix)
    (share / "scan.pdf").write_bytes(pdf.tobytes())
    result = convert_stage(new_items(share), max_bytes=MAX_BYTES)
    [work] = result.work
    [warning] = work.document.warnings
    assert warning.startswith("1 page(s) without a usable text layer: 2 (turn OCR on with KBSYNC_OCR")
    assert dict(result.counters) == {"converter_warnings": 1} and result.failures == []


@pytest.mark.parametrize("error", RUN_LEVEL_ERRORS, ids=lambda e: e.__name__)
def test_conditions_of_the_whole_run_are_not_a_documents_failure(tmp_path, error):
    share = tmp_path / "share"
    write_tree(share, {"a.md": "alpha", "b.md": "bravo"})

    def converter(path, *, doc_id, max_bytes, **_options):
        raise error(f"{doc_id}: the run cannot go on")

    with pytest.raises(error):
        convert_stage(new_items(share), max_bytes=MAX_BYTES, converter=converter)


# -- chunk ---------------------------------------------------------------------------------------
def test_chunk_counts_raw_and_kept_and_lets_the_markdown_go(tmp_path):
    share = tmp_path / "share"
    write_tree(share, {"guide.md": TWO_SECTIONS, "hollow.md": "soon only whitespace",
                       "twice.md": "# Same\n\nsame words\n\n# Same\n\nsame words"})
    converted = convert_stage(new_items(share), max_bytes=MAX_BYTES)
    hollow = converted.work[1]
    # Converters refuse empty text themselves: a document with nothing to chunk is made here.
    hollow.document = replace(hollow.document, markdown=" \n\t\n")
    result = chunk_stage(converted.work, config=ChunkConfig())
    assert [(w.source.doc_id, len(w.chunks)) for w in result.work] == [
        ("share/guide.md", 2), ("share/twice.md", 1)]
    assert dict(result.counters) == {"chunks_raw": 4, "chunks_kept": 3}  # one duplicate
    assert [(f.doc_id, f.error) for f in result.failures] == [("share/hollow.md", "EmptyDocument")]
    assert "no text left after chunking" in result.failures[0].message
    assert all(w.document is None for w in converted.work)


# -- embed ---------------------------------------------------------------------------------------
def test_embed_gives_every_chunk_a_vector_and_the_second_time_reads_the_cache(tmp_path, rt):
    share = tmp_path / "share"
    write_tree(share, {"guide.md": TWO_SECTIONS, "b.md": "# B\n\nbravo"})
    first = embedded(rt, share)
    assert first.failures == []
    assert dict(first.counters) == {"embeddings_computed": 3, "embeddings_cached": 0,
                                    "embeddings_truncated": 0, "embedding_bisect_requests": 0,
                                    "embeddings_failed": 0}
    for work in first.work:
        prepared = work.prepared
        assert len(prepared.vectors) == len(prepared.chunks) == len(work.chunks)
        assert prepared.failed == [False] * len(work.chunks)
        assert all(len(v) == 384 and math.isclose(math.hypot(*v), 1.0, rel_tol=1e-5)
                   for v in prepared.vectors)
        assert (prepared.title, prepared.source_type) == (work.title, "markdown")
    again = embedded(rt, share)  # nothing written: the same files are new again
    assert (again.counters["embeddings_computed"], again.counters["embeddings_cached"]) == (0, 3)
    assert [w.prepared.vectors for w in again.work] == [w.prepared.vectors for w in first.work]


def test_fully_failed_documents_are_dropped_and_partly_failed_ones_go_on_flagged(tmp_path, rt):
    share = tmp_path / "share"
    write_tree(share, {"all.md": "# All\n\nFLAKY through and through", "guide.md": TWO_SECTIONS,
                       "ok.md": "# OK\n\nfine"})
    service, _ = faulty_service(EmbeddingTransientError("503 from the test endpoint"))
    result = embedded(replace(rt, service=service), share)
    assert [(f.doc_id, f.error) for f in result.failures] == [("share/all.md", "EmbeddingFailed")]
    assert "previous version kept" in result.failures[0].message and one_line(result.failures)
    assert [(w.source.doc_id, w.prepared.failed) for w in result.work] == [
        ("share/guide.md", [False, True]), ("share/ok.md", [False])]
    assert result.work[0].prepared.status is DocStatus.PARTIAL
    assert result.work[0].prepared.vectors[1] == [0.0] * 384
    assert result.counters["embeddings_failed"] == 2
    assert result.counters["embeddings_computed"] == 2


def test_an_unexpected_error_is_narrowed_to_the_documents_it_hits(tmp_path, rt, caplog):
    share = tmp_path / "share"
    write_tree(share, {"a.md": "# A\n\nalpha", "poison.md": "# P\n\nFLAKY pears",
                       "z.md": "# Z\n\nzulu"})
    service, _ = faulty_service(TypeError("expected str, got NoneType\n  (second line)"))
    with caplog.at_level(logging.WARNING, logger="kbsync.ingest.stages"):
        result = embedded(replace(rt, service=service), share)
    assert [w.source.doc_id for w in result.work] == ["share/a.md", "share/z.md"]
    assert [(f.doc_id, f.error, f.message) for f in result.failures] == [
        ("share/poison.md", "InternalError",
         "InternalError: TypeError: expected str, got NoneType (while embedding)")]
    assert result.counters["embeddings_computed"] == 2 and result.counters["embeddings_failed"] == 0
    assert any("one by one" in r.getMessage() for r in caplog.records)


def test_a_refusal_of_the_service_is_the_runs_not_a_documents(tmp_path, rt):
    share = tmp_path / "share"
    write_tree(share, {"a.md": "# A\n\nFLAKY alpha"})
    service, _ = faulty_service(EmbeddingPermanentError("401: the key was refused"))
    with pytest.raises(EmbeddingPermanentError):
        embedded(replace(rt, service=service), share)


def test_nothing_to_embed_makes_no_request():
    service, provider = faulty_service(TypeError("never called"))
    result = embed_stage([], service=service)
    assert (result.work, result.failures, dict(result.counters), provider.calls) == ([], [], {}, 0)


# -- write and heal ------------------------------------------------------------------------------
def _points(rt, doc_id: str, **where):
    return list(rt.store.scroll(rt.collection, Filter.where(doc_id=doc_id, **where)))


def test_write_counts_added_updated_and_partial_and_lets_the_vectors_go(tmp_path, rt):
    share = tmp_path / "share"
    write_tree(share, {"guide.md": TWO_SECTIONS, "ok.md": "# OK\n\nfine"})
    service, _ = faulty_service(EmbeddingTransientError("503"))
    broken = replace(rt, service=service)
    ready = embedded(broken, share)
    result = write_stage(ready.work, runtime=broken, namespace="default", run_id="run-1")
    assert result.failures == [] and dict(result.counters) == {"added": 2, "partial": 1}
    assert all(w.prepared is None and w.chunks == [] for w in ready.work)
    states = rt.states.load("default")
    assert {d: (s.status, s.chunk_count, s.run_id) for d, s in states.items()} == {
        "share/guide.md": (DocStatus.PARTIAL, 2, "run-1"), "share/ok.md": (DocStatus.OK, 1, "run-1")}
    assert len(_points(rt, "share/guide.md")) == 2
    assert len(_points(rt, "share/guide.md", embedding_failed=True)) == 1

    (share / "ok.md").write_text("# OK\n\nfine, and longer now", encoding="utf-8")
    ready = embedded(broken, share)
    assert [w.item.action for w in ready.work] == [PlanAction.CHANGED]
    result = write_stage(ready.work, runtime=broken, namespace="default", run_id="run-2")
    assert dict(result.counters) == {"updated": 1, "partial": 0}
    assert [p.payload["text"] for p in _points(rt, "share/ok.md")] == [
        "# OK\n\nfine, and longer now"]


def test_a_write_the_store_refuses_is_that_documents_failure_only(tmp_path, rt):
    share = tmp_path / "share"
    write_tree(share, {"a.md": "# A\n\nalpha", "b.md": "# B\n\nbravo"})
    ready = embedded(rt, share)
    ready.work[0].prepared.vectors[0] = [math.nan] * 384
    result = write_stage(ready.work, runtime=rt, namespace="default", run_id="run-1")
    assert [(f.doc_id, f.error) for f in result.failures] == [("share/a.md", "InvalidVector")]
    assert one_line(result.failures) and dict(result.counters) == {"added": 1, "partial": 0}
    assert set(rt.states.load("default")) == {"share/b.md"}
    assert _points(rt, "share/a.md") == []


def test_heal_re_embeds_only_the_flagged_chunks(tmp_path, rt):
    share = tmp_path / "share"
    write_tree(share, {"guide.md": TWO_SECTIONS})
    service, provider = faulty_service(EmbeddingTransientError("503"))
    broken = replace(rt, service=service)
    write_stage(embedded(broken, share).work, runtime=broken, namespace="default", run_id="r1")
    items = plan(broken, share).of(PlanAction.HEAL)
    assert [i.doc_id for i in items] == ["share/guide.md"]

    still = heal_stage(items, runtime=broken, namespace="default", run_id="r2")
    assert still.failures == []
    assert dict(still.counters) == {"updated": 1, "embeddings_computed": 0,
                                    "embeddings_cached": 0, "embeddings_failed": 1,
                                    "embedding_bisect_requests": 0, "partial": 1}
    provider.broken = False
    calls = provider.calls
    healed = heal_stage(items, runtime=broken, namespace="default", run_id="r3")
    assert dict(healed.counters) == {"updated": 1, "embeddings_computed": 1,
                                     "embeddings_cached": 0, "embeddings_failed": 0,
                                     "embedding_bisect_requests": 0, "partial": 0}
    assert provider.calls == calls + 1  # the flagged chunk only
    state = rt.states.get("default", "share/guide.md")
    assert (state.status, state.run_id) == (DocStatus.OK, "r3")
    assert _points(rt, "share/guide.md", embedding_failed=True) == []
    assert len(_points(rt, "share/guide.md")) == 2
    assert plan(broken, share).counts()["unchanged"] == 1


# -- helpers -------------------------------------------------------------------------------------
def test_merge_adds_up_counters_and_keeps_every_failure_and_document(tmp_path):
    share = tmp_path / "share"
    write_tree(share, {"a.md": "# A\n\nalpha", "b.md": "  "})
    items = new_items(share)
    first = convert_stage(items[:1], max_bytes=MAX_BYTES)
    second = convert_stage(items[1:], max_bytes=MAX_BYTES)
    second.counters["converter_warnings"] += 2
    total = merge([first, second, StageResult()])
    assert [w.source.doc_id for w in total.work] == ["share/a.md"]
    assert [f.doc_id for f in total.failures] == ["share/b.md"]
    assert total.counters == Counter({"converter_warnings": 2})
    assert repr(total) == "StageResult(1 documents, 1 failures, {'converter_warnings': 2})"


@pytest.mark.parametrize("exc, stage, error, message", [
    (EmbeddingPermanentError("401: key refused\nbody: {...}"), "embedding",
     "EmbeddingPermanentError", "401: key refused"),
    (EmbeddingPermanentError(""), "", "EmbeddingPermanentError", "EmbeddingPermanentError"),
    (ValueError("bad offset\n  detail"), "chunking", "InternalError",
     "InternalError: ValueError: bad offset (while chunking)"),
    (KeyError(), "writing", "InternalError", "InternalError: KeyError (while writing)"),
    (RuntimeError("boom"), "", "InternalError", "InternalError: RuntimeError: boom"),
])
def test_failure_of_is_one_line_under_the_right_kind(tmp_path, exc, stage, error, message):
    share = tmp_path / "share"
    write_tree(share, {"a.md": "alpha"})
    source = new_items(share)[0].file
    failure = failure_of(source, exc, stage)
    assert (failure.doc_id, failure.path, failure.error, failure.message) == (
        "share/a.md", source.display, error, message)
