"""Every stage counter reaches the summary: none is dropped without a word."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from kbsync.ingest.stages import StageResult
from kbsync.ingest.summary import Count, IngestSummary, account_stage


def _summary() -> IngestSummary:
    return IngestSummary(run_id="r", namespace="n", collection="c", mode="incremental",
                         dry_run=False)


def test_every_counter_is_a_numeric_summary_field() -> None:
    fields = {f.name: f.type for f in dataclasses.fields(IngestSummary)}
    for count in Count:
        assert fields.get(count.value) in (int, "int"), count


def test_each_counter_is_added_and_a_stray_one_is_refused() -> None:
    summary = _summary()
    account_stage(summary, StageResult(counters=Counter({c: 2 for c in Count})))
    assert all(getattr(summary, c.value) == 2 for c in Count)
    assert summary.to_dict()["converter_warnings"] == 2  # was counted, then lost
    with pytest.raises(ValueError):
        account_stage(summary, StageResult(counters=Counter({"chunks_lost": 1})))


def test_counters_read_as_their_strings() -> None:
    counters = Counter({Count.EMBEDDINGS_COMPUTED: 3})
    assert counters["embeddings_computed"] == 3 and str(Count.ADDED) == "added"
