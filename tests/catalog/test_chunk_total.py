"""The kept chunk total of a root (:data:`kbsync.catalog.state.CHUNK_TOTAL`, issue 42).

A run's store check compares a root's chunk points with the sum of its records'
``chunk_count``. Summing them reads every record (a second of a no-op sync at 100,000
files), so a root's run keeps the sum in one meta record after its last commit. The
invariant tested here: the record exists only while it is that sum. Every write of
records deletes it first (a crash after that leaves none, never a stale one), a reader
trusts it only while the root's records number its ``documents``, and only to confirm a
match: a stale total can neither hide drift nor report drift that is not there.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from kbsync.catalog.state import CHUNK_TOTAL
from kbsync.ingest.discover import parse_root
from kbsync.ingest.executor import InProcess
from kbsync.ingest.runner import IngestRequest, run_ingest
from kbsync.store.base import Filter
from kbtest import write_tree


def _ingest(runtime, share, run_id="first"):
    return run_ingest(IngestRequest(roots=(parse_root(str(share)),), run_id=run_id),
                      InProcess(runtime))


def _drift(summary) -> list[str]:
    """The summary's warnings about the store check (others: owner-only files of tmp_path)."""
    return [w for w in summary.warnings if "drift" in w or "points" in w]


def _kept(runtime, root="share") -> list[dict]:
    return runtime.states.read_meta(CHUNK_TOTAL, total_namespace="default", total_root=root)


@pytest.fixture
def indexed(runtime, tmp_path):
    share = tmp_path / "share"
    write_tree(share, {f"d{i}.md": f"# Doc {i}\n\n" + "body words here. " * (40 * i + 1)
                       for i in range(4)})
    assert _ingest(runtime, share).added == 4
    return share


def test_a_roots_run_keeps_its_exact_total(runtime, indexed):
    exact = runtime.states.chunk_total("default", "share", kept=False)
    assert exact[0] == 4 and exact[1] >= 4
    [record] = _kept(runtime)
    assert (record["documents"], record["chunks"]) == exact
    assert runtime.states.chunk_total("default", "share") == exact


def test_a_no_op_reads_the_kept_total_not_the_records(runtime, indexed, monkeypatch):
    scrolled: list = []
    scroll = runtime.store.scroll

    def watched(name, flt=None, **kwargs):
        if name == runtime.states.collection and flt is not None and any(
                getattr(c, "key", None) == "root" for c in flt.must):
            scrolled.append(flt)
        return scroll(name, flt, **kwargs)
    monkeypatch.setattr(runtime.store, "scroll", watched)
    again = _ingest(runtime, indexed, "second")
    assert again.unchanged == 4 and again.repaired == 0 and not _drift(again)
    assert scrolled == []


def test_a_commit_forgets_the_total_before_it_writes(runtime, indexed, monkeypatch):
    states = runtime.states
    record = states.get("default", "share/d1.md")
    assert _kept(runtime)

    def lost(*args, **kwargs):
        raise OSError("the process died here")
    monkeypatch.setattr(runtime.store, "upsert", lost)
    with pytest.raises(OSError):
        states.commit([replace(record, chunk_count=record.chunk_count + 5)])
    monkeypatch.undo()
    assert _kept(runtime) == []  # forgotten before the write that never happened
    states.commit([replace(record, chunk_count=record.chunk_count + 5)])
    assert _kept(runtime) == []
    documents, chunks = states.chunk_total("default", "share")  # from the records
    assert (documents, chunks) == states.chunk_total("default", "share", kept=False)


def test_removing_records_forgets_the_namespaces_totals(runtime, indexed):
    runtime.states.remove("default", ["share/d0.md"])
    assert _kept(runtime) == []
    assert runtime.states.chunk_total("default", "share")[0] == 3


def test_a_total_whose_document_count_is_off_is_not_read(runtime, indexed):
    # as a removal by filter (kbsync remove) leaves it: the records are gone, the total not
    runtime.states.store.delete(runtime.states.collection,
                                Filter.where(namespace="default", doc_id="share/d2.md"))
    assert runtime.states.chunk_total("default", "share") == \
        runtime.states.chunk_total("default", "share", kept=False)


def test_a_stale_total_reports_no_drift(runtime, indexed, caplog):
    exact = runtime.states.chunk_total("default", "share", kept=False)
    runtime.states.write_meta(CHUNK_TOTAL, ("default", "share"), {
        "total_namespace": "default", "total_root": "share", "documents": exact[0],
        "chunks": exact[1] + 7})  # a total no write path leaves: the check must not trust it
    with caplog.at_level(logging.WARNING):
        again = _ingest(runtime, indexed, "second")
    assert again.unchanged == 4 and again.repaired == 0 and not _drift(again)
    assert "store drift" not in caplog.text


def test_drift_is_still_found_with_a_kept_total(runtime, indexed):
    assert _kept(runtime)
    [point] = list(runtime.store.scroll(runtime.collection,
                                        Filter.where(namespace="default", doc_id="share/d3.md"),
                                        page_size=1))[:1]
    runtime.store.delete_ids(runtime.collection, [point.id])
    again = _ingest(runtime, indexed, "second")
    assert again.repaired == 1 and again.updated == 1
    # the repaired run keeps the new total again
    assert (_kept(runtime)[0]["documents"], _kept(runtime)[0]["chunks"]) == \
        runtime.states.chunk_total("default", "share", kept=False)


def test_removing_a_root_forgets_its_total_only(runtime, indexed, tmp_path):
    from kbsync.ingest.remove import Target, remove

    other = tmp_path / "other"
    write_tree(other, {"x.md": "# X\n\nexes"})
    assert _ingest(runtime, other, "other").added == 1
    assert _kept(runtime) and _kept(runtime, "other")
    remove(runtime.store, collection=runtime.collection,
           state_collection=runtime.states.collection, target=Target("default", "share"))
    assert _kept(runtime) == [] and _kept(runtime, "other")
    assert runtime.states.chunk_total("default", "share") == (0, 0)
