"""A failed run's counts travel with its exception (kbsync.ingest.summary, issue 11.3)."""

from __future__ import annotations

import pytest
from prefect import flow

from kbsync.errors import StoreUnavailable
from kbsync.ingest.summary import IngestSummary, attach, counts_of, keep_counts


def _summary(**counts) -> IngestSummary:
    summary = IngestSummary(run_id="r", namespace="default", collection="kbsync",
                            mode="incremental", dry_run=False)
    for key, value in counts.items():
        setattr(summary, key, value)
    return summary


def test_nested_runs_add_their_counts_once():
    outer = _summary(files_seen=2, added=2, roots=["a"])
    with pytest.raises(StoreUnavailable) as caught:
        with keep_counts(outer):
            inner = _summary(files_seen=3, added=1, roots=["b"])
            with keep_counts(inner):
                raise StoreUnavailable("store went away")
    counts = counts_of(caught.value)
    assert counts["files_seen"] == 5 and counts["added"] == 3 and counts["roots"] == ["a", "b"]


def test_an_exception_without_counts_reports_none():
    assert counts_of(ValueError("x")) is None


def test_counts_survive_a_failed_subflow_and_the_flow_state(prefect_api):
    @flow
    def child() -> dict:
        summary = _summary(files_seen=4, added=4)
        with keep_counts(summary):
            raise StoreUnavailable("store went away mid-root")

    @flow
    def parent() -> dict:
        summary = _summary(files_seen=1, unchanged=1)
        try:
            child()
        except BaseException as exc:
            attach(exc, summary)
            raise
        return summary.to_dict()

    error = parent(return_state=True).result(raise_on_failure=False)
    assert isinstance(error, StoreUnavailable)
    counts = counts_of(error)
    assert counts["files_seen"] == 5 and counts["added"] == 4 and counts["unchanged"] == 1
