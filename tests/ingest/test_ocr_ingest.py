"""OCR through a whole ingest: the fingerprint rule and the chunk payload.

Turning OCR on reprocesses exactly the documents that had pages without a usable text
layer (their record says how many: ``scanned_pages``), adds the scans that failed before
and the images that were ignored, and leaves every other document unchanged; changing the
OCR languages reprocesses the same documents again. OCR'd chunks carry ``ocr: true`` and
the engine's confidence, others carry neither.
"""

from __future__ import annotations

import pymupdf
import pytest

from kbsync.runtime import Runtime
from kbsync.ingest.discover import parse_root
from kbsync.ingest.runner import run_plain
from kbsync.catalog.state import OCR_OFF, document_fingerprint
from kbsync.ingest.classify import plan_files
from kbsync.models import DocState, DocStatus, PlanAction, SourceFile
from kbsync.settings import Settings
from kbsync.store.base import Filter
from tests.scans import (
    ENGLISH,
    add_scanned_page,
    add_text_page,
    scan_pdf,
    scan_png,
    tesseract_missing,
)


def make_share(root):
    root.mkdir()
    (root / "a.md").write_text("# Notes\n\nPlain Markdown about sailing knots.\n")
    pdf = pymupdf.open()
    add_text_page(pdf)
    (root / "text.pdf").write_bytes(pdf.tobytes())
    mixed = pymupdf.open()
    add_text_page(mixed)
    add_scanned_page(mixed, [(ENGLISH, "helv")])
    (root / "mixed.pdf").write_bytes(mixed.tobytes())
    (root / "scan.pdf").write_bytes(scan_pdf([[(ENGLISH, "helv")]]))
    (root / "note.png").write_bytes(scan_png([(ENGLISH, "helv")]))


def run(settings, share) -> dict:
    runtime = Runtime.open(settings)
    try:
        return run_plain([parse_root(str(share))], runtime=runtime).to_dict()
    finally:
        runtime.close()


def counts(summary: dict) -> dict:
    keys = ("added", "updated", "unchanged", "failed", "ignored")
    return {k: summary[k] for k in keys} | {"failures": [f["doc_id"] for f in summary["failures"]]}


def records_and_points(settings):
    runtime = Runtime.open(settings)
    try:
        states = runtime.states.load("default")
        points = list(runtime.store.scroll(runtime.collection, Filter.where(namespace="default")))
    finally:
        runtime.close()
    return states, [p.payload for p in points]


@pytest.mark.skipif(tesseract_missing() is not None, reason=tesseract_missing() or "")
def test_turning_ocr_on_reprocesses_exactly_the_documents_with_scanned_pages(
        settings, tmp_path, monkeypatch):
    share = tmp_path / "share"
    make_share(share)
    first = run(settings, share)
    assert counts(first) == {"added": 3, "updated": 0, "unchanged": 0, "failed": 1,
                             "ignored": 1, "failures": ["share/scan.pdf"]}
    assert "KBSYNC_OCR=true" in first["failures"][0]["message"]
    states, _ = records_and_points(settings)
    assert {d: s.scanned_pages for d, s in states.items()} == {
        "share/a.md": 0, "share/text.pdf": 0, "share/mixed.pdf": 1}
    assert counts(run(settings, share))["unchanged"] == 3  # OCR still off: nothing moves

    monkeypatch.setenv("KBSYNC_OCR", "true")
    on = Settings()
    assert counts(run(on, share)) == {"added": 2, "updated": 1, "unchanged": 2, "failed": 0,
                                      "ignored": 0, "failures": []}
    states, payloads = records_and_points(on)
    assert {d: s.scanned_pages for d, s in states.items()} == {
        "share/a.md": 0, "share/text.pdf": 0, "share/mixed.pdf": 1, "share/scan.pdf": 1,
        "share/note.png": 1}
    for payload in payloads:
        pages = range(payload["page_start"] or 0, (payload["page_end"] or 0) + 1)
        scanned = payload["doc_id"] in ("share/scan.pdf", "share/note.png") or (
            payload["doc_id"] == "share/mixed.pdf" and 2 in pages)
        assert payload.get("ocr", False) is scanned, payload
        assert ("ocr_confidence" in payload) is scanned
        if scanned:
            assert 50 <= payload["ocr_confidence"] <= 100
    assert {p["source_type"] for p in payloads if p["doc_id"] == "share/note.png"} == {"image"}
    assert counts(run(on, share))["unchanged"] == 5

    monkeypatch.setenv("KBSYNC_OCR_LANGUAGES", "eng")  # another OCR: the same three again
    assert counts(run(Settings(), share)) == {"added": 0, "updated": 3, "unchanged": 2,
                                              "failed": 0, "ignored": 0, "failures": []}


def _record(doc_id: str, source: SourceFile, fingerprint: str, scanned: int | None) -> DocState:
    return DocState(doc_id=doc_id, namespace="default", root="share", path=str(source.path),
                    content_hash="h", fingerprint=fingerprint, chunk_count=1,
                    status=DocStatus.OK, updated_at="", run_id="r", size=source.size,
                    mtime_ns=source.mtime_ns, scanned_pages=scanned)


@pytest.mark.parametrize("ocr_key, pdf_action", [(OCR_OFF, PlanAction.UNCHANGED),
                                                 ("tesseract-5/eng/300dpi", PlanAction.CHANGED)])
def test_records_from_before_ocr(tmp_path, ocr_key, pdf_action):
    """A record without ``scanned_pages`` (written before OCR existed): with OCR on, a PDF's
    is read once more (it may hold scans), any other file's stays unchanged."""
    files, states = [], {}
    for name in ("old.pdf", "old.md"):
        path = tmp_path / name
        path.write_bytes(b"x")
        st = path.stat()
        source = SourceFile(doc_id=f"share/{name}", root="share", path=path, rel_path=name,
                            size=st.st_size, mtime_ns=st.st_mtime_ns)
        files.append(source)
        states[source.doc_id] = _record(source.doc_id, source, "base", None)
    plan = plan_files(files, states, fingerprint="base", ocr_key=ocr_key)
    actions = {i.doc_id: i.action for i in plan.items}
    assert actions == {"share/old.pdf": pdf_action, "share/old.md": PlanAction.UNCHANGED}


def test_document_fingerprint_names_ocr_only_for_scans():
    assert document_fingerprint("base", "tesseract-5/eng", 0) == "base"
    assert document_fingerprint("base", OCR_OFF, 0) == "base"
    with_scans = {document_fingerprint("base", key, 2)
                  for key in (OCR_OFF, "tesseract-5/eng", "tesseract-5/eng+chi_sim")}
    assert len(with_scans) == 3 and "base" not in with_scans
