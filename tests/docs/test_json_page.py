"""docs/reference/json.md documents every field the JSON objects carry: each field
``IngestSummary`` emits, in the ingest section and in its example object, each stage
``stage_s`` may hold, and each field of a search result, a hit, an answer and a citation."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from kbsync.ingest.summary import STAGE_ORDER, IngestSummary
from kbsync.models import SearchHit
from kbsync.query.answer import Answer, Citation
from kbsync.query.search import SearchResult

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "json.md"


def _section(title: str) -> str:
    """The text under ``## `title` `` up to the next level-2 heading."""
    text = PAGE.read_text(encoding="utf-8")
    start = text.index(f"\n## `{title}`\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else len(text)]


def _summary_fields() -> list[str]:
    empty = IngestSummary(run_id="", namespace="default", collection="kbsync",
                          mode="incremental", dry_run=False)
    return list(empty.to_dict())


def test_every_field_the_ingest_summary_emits_is_documented() -> None:
    section = _section("kbsync ingest --json")
    missing = [name for name in _summary_fields() if f"`{name}`" not in section]
    assert not missing, f"document {missing} in docs/reference/json.md (kbsync ingest --json)"


def test_the_ingest_example_is_a_whole_summary() -> None:
    section = _section("kbsync ingest --json")
    example = json.loads(re.search(r"```json\n(.*?)```", section, re.DOTALL).group(1))
    assert list(example) == _summary_fields(), "the example must list every field, in order"


def test_every_stage_is_documented() -> None:
    section = _section("kbsync ingest --json")
    missing = [stage for stage in STAGE_ORDER if f"`{stage}`" not in section]
    assert not missing, f"stage_s stages not documented: {missing}"


@pytest.mark.parametrize("record, title", [
    (SearchResult, "kbsync search --json"), (SearchHit, "kbsync search --json"),
    (Answer, "kbsync ask --json"), (Citation, "kbsync ask --json"),
])
def test_every_field_of_a_query_result_is_documented(record, title) -> None:
    section = _section(title)
    missing = [f.name for f in dataclasses.fields(record)
               if not re.search(rf"\b{re.escape(f.name)}\b", section)]
    assert not missing, f"document {missing} of {record.__name__} under `{title}`"
