"""A root's kept listing (:mod:`kbsync.ingest.listing`, issue 42): a no-op after a clean run
plans from the walk alone and reads no document record, and its plan is the one the records
give.

The oracle is the plan from the records: after each change to a share, a dry run with the
kept marks and one with them set aside (``kept_marks`` patched to ``None``) must report the
same; then the real run, and a no-op after it that reads no record again. Both adapters.
"""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from kbsync.catalog import failed
from kbsync.catalog.state import CHUNK_TOTAL
from kbsync.ingest import plan as plan_module
from kbsync.ingest.discover import parse_root
from kbsync.ingest.runner import IngestRequest, run_ingest
from kbsync.models import SyncMode
from kbsync.store.base import Filter
from kbtest import recording_executor, write_tree

RSA = ("-----BEGIN RSA PRIVATE KEY-----\n"
       "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
       "-----END RSA PRIVATE KEY-----\n")
SLICE = 3  # files a plan slice holds: 8 files make 3 slices


def _share(tmp_path):
    share = tmp_path / "share"
    write_tree(share, {f"d{i}.md": f"# Doc {i}\n\n" + "words in a body. " * (5 + 9 * i)
                       for i in range(7)})
    write_tree(share, {"key.md": f"# Deploy\n\n```\n{RSA}```\n"})  # fails every run
    return share


class Reads:
    """How many slices read their records (``load_docs`` calls with doc_ids), and how many
    times a root's records were streamed (full mode's preflight, ``iter_records``)."""

    def __init__(self, runtime, monkeypatch):
        self.calls = self.streams = 0
        load, stream = runtime.states.load_docs, runtime.states.iter_records

        def counted(namespace, doc_ids, **kwargs):
            self.calls += bool(doc_ids)
            return load(namespace, doc_ids, **kwargs)

        def streamed(namespace, root):
            self.streams += 1
            return stream(namespace, root)
        monkeypatch.setattr(runtime.states, "load_docs", counted)
        monkeypatch.setattr(runtime.states, "iter_records", streamed)


def _run(runtime, share, **options) -> dict:
    request = IngestRequest(roots=(parse_root(str(share)),), **options)
    summary = run_ingest(request, recording_executor(runtime, files_per_slice=SLICE)).to_dict()
    for volatile in ("run_id", "duration_s", "stage_s"):
        summary.pop(volatile)
    return summary


def _same_plan_either_way(runtime, share, monkeypatch, **options) -> dict:
    """A dry run with the kept marks, and one planned from the records: the same report."""
    with_marks = _run(runtime, share, dry_run=True, **options)
    with monkeypatch.context() as patch:
        patch.setattr(plan_module, "kept_marks", lambda record, key: None)
        from_records = _run(runtime, share, dry_run=True, **options)
    assert with_marks == from_records
    return with_marks


def _listing(runtime) -> dict | None:
    records = runtime.states.read_meta(CHUNK_TOTAL, total_namespace="default",
                                       total_root="share")
    return records[0].get("listing") if records else None


def _settle(runtime, share, monkeypatch, **options) -> dict:
    """The real run, then the first no-op (it keeps the listing); returns the no-op's report
    after checking that the next no-op reads no record and reports the same."""
    _run(runtime, share, **options)
    settled = _run(runtime, share, **options)
    assert _listing(runtime) is not None
    reads = Reads(runtime, monkeypatch)
    again = _run(runtime, share, **options)
    assert reads.calls == 0, "a no-op after a clean run read document records"
    assert reads.streams == 0, "full mode's preflight streamed the records of a clean root"
    assert again == settled
    return again


@pytest.fixture
def settled(adapter_runtime, tmp_path, monkeypatch):
    share = _share(tmp_path)
    no_op = _settle(adapter_runtime, share, monkeypatch, mode=SyncMode.FULL)
    assert (no_op["unchanged"], no_op["failed"], no_op["failed_remembered"]) == (7, 1, 1)
    assert len(_listing(adapter_runtime)["slices"]) == 3
    return adapter_runtime, share


def test_a_no_op_reads_no_record_and_reports_the_known_failure_again(settled, monkeypatch):
    runtime, share = settled
    report = _same_plan_either_way(runtime, share, monkeypatch, mode=SyncMode.FULL)
    assert [f["error"] for f in report["failures"]] == ["SecretDetected"]


EXPECTED = {  # what each change's dry run must report, so no change passes unseen
    "touch": {"files_hashed": 1, "unchanged": 7}, "edit": {"updated": 1, "unchanged": 6},
    "add": {"added": 1, "unchanged": 7}, "delete": {"deleted": 1, "unchanged": 6},
    "chmod": {"permissions_updated": 1, "unchanged": 7},
    "fix-secret": {"added": 1, "failed": 0, "failed_remembered": 0},
    "drift": {"repaired": 1, "updated": 1}, "force": {"updated": 7, "failed_remembered": 0},
}


@pytest.mark.parametrize("change", ["touch", "edit", "add", "delete", "chmod", "fix-secret",
                                    "drift", "force"])
def test_every_change_is_planned_as_the_records_plan_it(settled, monkeypatch, change):
    runtime, share = settled
    options: dict = {"mode": SyncMode.FULL}
    if change == "touch":  # same bytes, new mtime: hashed, unchanged, its stat refreshed
        os.utime(share / "d3.md", ns=(1, 1_000_000_000))
    elif change == "edit":
        (share / "d3.md").write_text("# Doc 3\n\nnew words")
    elif change == "add":
        (share / "d10.md").write_text("# Doc 10\n\nten")
    elif change == "delete":
        (share / "d5.md").unlink()
    elif change == "chmod":
        (share / "d1.md").chmod(0o600)
    elif change == "fix-secret":
        (share / "key.md").write_text("# Deploy\n\nno key here now")
    elif change == "drift":  # a document's points gone behind the state's back
        runtime.store.delete(runtime.collection,
                             Filter.where(namespace="default", doc_id="share/d2.md"))
    elif change == "force":
        options["force"] = True
    planned = _same_plan_either_way(runtime, share, monkeypatch, **options)
    assert {k: planned[k] for k in EXPECTED[change]} == EXPECTED[change]
    no_op = _settle(runtime, share, monkeypatch, mode=SyncMode.FULL)
    assert no_op["added"] + no_op["updated"] + no_op["deleted"] == 0


def test_only_the_changed_slice_reads_its_records(settled, monkeypatch):
    runtime, share = settled
    (share / "d4.md").write_text("# Doc 4\n\nedited")  # the second slice: d3..d5
    reads = Reads(runtime, monkeypatch)
    report = _run(runtime, share, mode=SyncMode.FULL)
    assert report["updated"] == 1 and reads.calls == 1


def test_a_settings_change_sets_the_marks_aside(settled, monkeypatch):
    runtime, share = settled
    runtime_config = runtime.config
    monkeypatch.setattr(runtime, "config", replace(runtime_config,
                                                   max_file_bytes=runtime_config.max_file_bytes - 1))
    reads = Reads(runtime, monkeypatch)
    _run(runtime, share, dry_run=True, mode=SyncMode.FULL)
    assert reads.calls == 3  # another failure key: every slice planned from its records


def test_writes_of_records_or_remembered_failures_forget_the_listing(settled):
    runtime, _ = settled
    failed.forget(runtime.states, "default", ["share/key.md"])
    assert _listing(runtime) is None


def _no_op_reads_nothing(runtime, share, monkeypatch) -> dict:
    """A dry run with the kept marks plans as one from the records; the real no-op then
    reads no record."""
    _same_plan_either_way(runtime, share, monkeypatch, mode=SyncMode.FULL)
    reads = Reads(runtime, monkeypatch)
    report = _run(runtime, share, mode=SyncMode.FULL)
    assert (reads.calls, reads.streams) == (0, 0), "the no-op after a writing run read records"
    return report


def test_a_run_that_writes_every_file_whole_keeps_the_listing(adapter_runtime, tmp_path,
                                                              monkeypatch):
    share = _share(tmp_path)
    (share / "key.md").unlink()
    assert _run(adapter_runtime, share, mode=SyncMode.FULL)["added"] == 7
    assert len(_listing(adapter_runtime)["slices"]) == 3
    assert _no_op_reads_nothing(adapter_runtime, share, monkeypatch)["unchanged"] == 7
    (share / "d4.md").write_text("# Doc 4\n\nedited")  # a change run, written whole
    os.utime(share / "d0.md", ns=(1, 1_000_000_000))  # and a record refreshed
    report = _run(adapter_runtime, share, mode=SyncMode.FULL)
    assert (report["updated"], report["files_hashed"]) == (1, 2)
    assert _no_op_reads_nothing(adapter_runtime, share, monkeypatch)["unchanged"] == 7


def test_a_run_with_a_new_failure_keeps_no_listing(adapter_runtime, tmp_path):
    """The failure is remembered by that run; the run after it, which reports it again
    as remembered, is clean and keeps one (the ``settled`` fixture)."""
    first = _run(adapter_runtime, _share(tmp_path), mode=SyncMode.FULL)
    assert (first["added"], first["failed"], first["failed_remembered"]) == (7, 1, 0)
    assert _listing(adapter_runtime) is None
