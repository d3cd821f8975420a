"""The summary's ``stage_s``: wall seconds per stage, additive to the JSON contract."""

from __future__ import annotations

from kbtest import write_tree
from kbsync.ingest.discover import parse_root
from kbsync.ingest.runner import run_plain
from kbsync.ingest.stages import StageResult
from kbsync.ingest.summary import STAGES, IngestSummary, account_stage


def test_first_run_reports_every_stage_then_a_noop_only_checks_plan_finish(runtime, tmp_path):
    share = tmp_path / "share"
    write_tree(share, {f"d{i}.md": f"# Doc {i}\n\nBody text {i}." for i in range(5)})
    first = run_plain([parse_root(str(share))], runtime=runtime).to_dict()
    assert list(first["stage_s"]) == list(STAGES)  # in stage order
    assert all(v >= 0 for v in first["stage_s"].values())
    assert sum(first["stage_s"].values()) <= first["duration_s"] * 1.5 + 0.1  # batches may overlap
    again = run_plain([parse_root(str(share))], runtime=runtime).to_dict()
    assert list(again["stage_s"]) == ["checks", "plan", "finish"]  # nothing converted


def test_stage_seconds_add_up_across_batches_and_roots() -> None:
    summary = IngestSummary(run_id="r", namespace="n", collection="c", mode="incremental",
                            dry_run=False)
    account_stage(summary, StageResult(seconds={"convert": 1.25}))
    account_stage(summary, StageResult(seconds={"convert": 0.5, "embed": 2.0}))
    summary.merge({"stage_s": {"plan": 0.1, "embed": 1.0}, "added": 2})
    assert summary.to_dict()["stage_s"] == {"plan": 0.1, "convert": 1.75, "embed": 3.0}
    assert summary.added == 2
