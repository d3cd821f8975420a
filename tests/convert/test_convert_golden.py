"""Golden tests: the Markdown of one small real file per format, checked in.

Expected outputs live in ``tests/cases/golden/<case>.md`` with ``<case>.meta.json``
(title, source_type, converter, page_offsets, warnings, converter_version).

Regenerate after an intended change of output::

    KBSYNC_UPDATE_GOLDEN=1 .venv/bin/pytest tests/convert/test_convert_golden.py

Regeneration refuses to overwrite a changed output recorded under the current
``CONVERTER_VERSION``: changed Markdown must come with a version bump, because the version
is part of every document's fingerprint (that is what re-indexes old documents).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kbsync.convert import CONVERTER_VERSION, convert

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data" / "sample"
GOLDEN = REPO / "tests" / "cases" / "golden"
UPDATE = os.environ.get("KBSYNC_UPDATE_GOLDEN") == "1"

CASES = {
    "pdf": "policies/security-policy.pdf",
    "docx": "incidents/2024-03-12-ingestion-outage.docx",
    "xlsx": "billing/plans-and-invoices.xlsx",
    "pptx": "product/roadmap-2024.pptx",
    "html": "engineering/api-reference.html",
    "csv": "support/tickets-2024-q1.csv",
    "json": "engineering/service-catalog.json",
    "txt": "product/release-notes.txt",
    "md": "handbook/onboarding.md",
    "code": "engineering/scripts/rotate_api_keys.py",
    "md-zh": "zh/faq.md",
    "txt-gbk": "zh/ops-runbook.txt",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case: str) -> None:
    doc = convert(SAMPLE / CASES[case], doc_id=case)
    meta = {
        "source": CASES[case],
        "title": doc.title,
        "source_type": doc.source_type,
        "converter": doc.converter,
        "page_offsets": doc.page_offsets,
        "warnings": doc.warnings,
        "converter_version": CONVERTER_VERSION,
    }
    md_path, meta_path = GOLDEN / f"{case}.md", GOLDEN / f"{case}.meta.json"
    if UPDATE:
        _update(md_path, meta_path, doc.markdown, meta)
        return
    assert md_path.exists(), f"missing golden {md_path.name}: run with KBSYNC_UPDATE_GOLDEN=1"
    assert doc.markdown == md_path.read_text(encoding="utf-8")
    assert meta == json.loads(meta_path.read_text(encoding="utf-8"))


def _update(md_path: Path, meta_path: Path, markdown: str, meta: dict) -> None:
    if md_path.exists() and meta_path.exists():
        old_meta = json.loads(meta_path.read_text(encoding="utf-8"))
        changed = md_path.read_text(encoding="utf-8") != markdown
        if changed and old_meta.get("converter_version") == CONVERTER_VERSION:
            pytest.fail(f"{md_path.name} changed under CONVERTER_VERSION {CONVERTER_VERSION}: "
                        "bump kbsync.convert.CONVERTER_VERSION, then regenerate")
    GOLDEN.mkdir(parents=True, exist_ok=True)
    md_path.write_text(markdown, encoding="utf-8")
    meta_path.write_text(json.dumps(meta, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
