"""Incremental sync scenarios (LangChain's indexing tests, ported to files and roots).

Each test asserts the whole summary, then runs again. Runs go through
``run_plain`` (the same stage functions the Prefect flow calls) so they need no
Prefect server; the flow itself is tested in tests/flows.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kbtest import write_tree
from kbsync.ingest.discover import parse_root
from kbsync.errors import MassDeleteRefused
from kbsync.ingest.plan import DeleteGuard
from kbsync.ingest.runner import run_plain
from kbsync.models import SyncMode
from kbsync.query.search import search
from kbsync.store.base import Filter

# owner_only follows the umask the test's files were made under (tests/perms count it)
VOLATILE = ("run_id", "duration_s", "stage_s", "collection", "files_hashed", "warnings", "roots",
            "embeddings_truncated", "owner_only")


def docs(n: int, prefix: str = "doc") -> dict[str, str]:
    return {f"{prefix}{i}.md": f"# Title {prefix} {i}\n\nUnique body text number {i} about "
            f"topic-{prefix}-{i}." for i in range(n)}


def run(runtime, *roots: Path, **kwargs):
    specs = [parse_root(str(r)) for r in roots]
    return run_plain(specs, runtime=runtime, **kwargs).to_dict()


def core(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if k not in VOLATILE}


def expected(**overrides) -> dict:
    base = dict(namespace="default", mode="incremental", dry_run=False, files_seen=0, added=0,
                updated=0, unchanged=0, deleted=0, failed=0, ignored=0, chunks_raw=0,
                chunks_kept=0, embeddings_computed=0, embeddings_cached=0, embeddings_failed=0,
                failures=[], partial=0, repaired=0, embedding_bisect_requests=0,
                converter_warnings=0, kept_unreadable=0, kept_excluded=0, ignored_by_kind={},
                not_attempted=0, permissions_updated=0, permissions_unreadable=0,
                failed_remembered=0)
    base.update(overrides)
    return base


def doc_ids(runtime, namespace="default") -> set[str]:
    return {p.payload["doc_id"] for p in runtime.store.scroll(
        runtime.collection, Filter.where(namespace=namespace))}


def snapshot(runtime) -> dict[str, dict]:
    """Every chunk point: id -> payload (the index as a comparable value)."""
    return {p.id: p.payload for p in runtime.store.scroll(runtime.collection)}


def test_first_run_adds_all_then_rerun_is_a_noop(runtime, tmp_path):
    share = tmp_path / "share"
    write_tree(share, docs(3))
    first = run(runtime, share)
    assert core(first) == expected(files_seen=3, added=3, chunks_raw=3, chunks_kept=3,
                                   embeddings_computed=3)
    second = run(runtime, share)
    assert core(second) == expected(files_seen=3, unchanged=3)
    assert second["files_hashed"] == 0  # stat check: nothing hashed, converted or embedded


def test_touched_file_is_hashed_once_then_skipped(runtime, tmp_path):
    share = tmp_path / "share"
    write_tree(share, docs(2))
    run(runtime, share)
    os.utime(share / "doc0.md", ns=(1, 1))
    again = run(runtime, share)
    assert core(again) == expected(files_seen=2, unchanged=2)
    assert again["files_hashed"] == 1
    assert run(runtime, share)["files_hashed"] == 0


@pytest.mark.parametrize("mode", [SyncMode.INCREMENTAL, SyncMode.FULL])
def test_modify_delete_add(runtime, tmp_path, mode):
    share = tmp_path / "share"
    write_tree(share, docs(4))
    run(runtime, share)
    (share / "doc0.md").write_text("# Title doc 0\n\nRewritten body.", encoding="utf-8")
    (share / "doc1.md").unlink()
    write_tree(share, {"new.md": "# New\n\nA brand new document."})
    summary = run(runtime, share, mode=mode)
    full = mode is SyncMode.FULL
    assert core(summary) == expected(mode=mode.value, files_seen=4, added=1, updated=1,
                                     unchanged=2, deleted=1 if full else 0, chunks_raw=2,
                                     chunks_kept=2, embeddings_computed=2)
    present = doc_ids(runtime)
    assert ("share/doc1.md" in present) is not full
    assert {"share/doc0.md", "share/new.md"} <= present
    texts = [p.payload["text"] for p in runtime.store.scroll(
        runtime.collection, Filter.where(doc_id="share/doc0.md"))]
    assert texts == ["# Title doc 0\n\nRewritten body."]  # old chunk replaced, not duplicated
    assert core(run(runtime, share, mode=mode)) == expected(mode=mode.value, files_seen=4,
                                                            unchanged=4)


def test_full_mode_on_one_root_leaves_other_roots_and_namespaces(runtime, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write_tree(a, docs(3, "a"))
    write_tree(b, docs(3, "b"))
    run(runtime, a, b)
    run(runtime, a, namespace="other")
    (a / "a0.md").unlink()
    summary = run(runtime, a, mode=SyncMode.FULL)
    assert summary["deleted"] == 1
    assert doc_ids(runtime) == {"a/a1.md", "a/a2.md", "b/b0.md", "b/b1.md", "b/b2.md"}
    assert doc_ids(runtime, "other") == {"a/a0.md", "a/a1.md", "a/a2.md"}


def test_same_files_in_two_namespaces_are_separate_documents(runtime, tmp_path):
    share = tmp_path / "share"
    write_tree(share, docs(2))
    one = run(runtime, share, namespace="one")
    two = run(runtime, share, namespace="two")
    assert one["added"] == two["added"] == 2
    assert two["embeddings_computed"] == 0 and two["embeddings_cached"] == 2  # the cache
    hits = search("topic-doc-1", store=runtime.store, service=runtime.service,
                  collection=runtime.collection, namespace="two", k=10)
    assert hits.results and all(runtime.store.count(runtime.collection, Filter.where(
        namespace="two", doc_id=h.doc_id)) for h in hits.results)
    assert runtime.store.count(runtime.collection, Filter.where(namespace="one")) == 2


def test_emptied_root_is_refused_in_full_mode_and_allowed_with_flag(runtime, tmp_path):
    share = tmp_path / "share"
    write_tree(share, docs(3))
    run(runtime, share)
    for path in share.iterdir():
        path.unlink()
    before = snapshot(runtime)
    with pytest.raises(MassDeleteRefused, match="holds no files"):
        run(runtime, share, mode=SyncMode.FULL)
    assert snapshot(runtime) == before
    incremental = run(runtime, share)
    assert incremental["deleted"] == 0 and any("holds no files" in w
                                               for w in incremental["warnings"])
    allowed = run(runtime, share, mode=SyncMode.FULL, guard=DeleteGuard(allow_mass_delete=True))
    assert core(allowed) == expected(mode="full", deleted=3)
    assert snapshot(runtime) == {}


def test_mass_delete_over_the_fraction_is_refused(runtime, tmp_path):
    share = tmp_path / "share"
    write_tree(share, docs(4))
    run(runtime, share)
    for i in range(3):
        (share / f"doc{i}.md").unlink()
    before = snapshot(runtime)
    with pytest.raises(MassDeleteRefused, match="3 of 4"):
        run(runtime, share, mode=SyncMode.FULL)
    assert snapshot(runtime) == before
    relaxed = run(runtime, share, mode=SyncMode.FULL, guard=DeleteGuard(max_delete_fraction=0.8))
    assert relaxed["deleted"] == 3


def test_dry_run_reports_the_plan_and_writes_nothing(runtime, tmp_path):
    share = tmp_path / "share"
    write_tree(share, docs(3))
    run(runtime, share)
    (share / "doc0.md").write_text("changed", encoding="utf-8")
    (share / "doc1.md").unlink()
    write_tree(share, {"new.md": "new"})
    before = snapshot(runtime)
    plan = run(runtime, share, mode=SyncMode.FULL, dry_run=True)
    assert core(plan) == expected(mode="full", dry_run=True, files_seen=3, added=1, updated=1,
                                  unchanged=1, deleted=1)
    assert snapshot(runtime) == before


def test_rename_is_delete_plus_add_served_by_the_cache(runtime, tmp_path):
    share = tmp_path / "share"
    write_tree(share, docs(2))
    run(runtime, share)
    (share / "doc0.md").rename(share / "renamed.md")
    summary = run(runtime, share, mode=SyncMode.FULL)
    assert core(summary) == expected(mode="full", files_seen=2, added=1, unchanged=1, deleted=1,
                                     chunks_raw=1, chunks_kept=1, embeddings_cached=1)
    assert doc_ids(runtime) == {"share/renamed.md", "share/doc1.md"}


def test_fingerprint_change_reprocesses_without_new_embeddings(settings, tmp_path,
                                                               monkeypatch):
    from kbsync.runtime import Runtime

    share = tmp_path / "share"
    write_tree(share, docs(3))
    runtime = Runtime.open(settings)
    run(runtime, share)
    runtime.close()
    monkeypatch.setenv("KBSYNC_CHUNK_TOKENS", "300")  # texts are short: same chunks
    runtime = Runtime.open(type(settings)())
    try:
        summary = run(runtime, share)
        assert core(summary) == expected(files_seen=3, updated=3, chunks_raw=3, chunks_kept=3,
                                         embeddings_cached=3)
    finally:
        runtime.close()


def test_failing_file_keeps_its_previous_version(runtime, tmp_path):
    share = tmp_path / "share"
    write_tree(share, docs(2))
    run(runtime, share)
    before = snapshot(runtime)
    (share / "doc0.md").write_bytes(b"\x00\x01binary\x00garbage" * 10)
    summary = run(runtime, share, mode=SyncMode.FULL)
    assert summary["failed"] == 1 and summary["deleted"] == 0
    assert summary["failures"][0]["doc_id"] == "share/doc0.md"
    assert snapshot(runtime) == before  # the old version stays searchable
    (share / "doc0.md").write_text("# Fixed\n\nGood again.", encoding="utf-8")
    assert run(runtime, share)["updated"] == 1  # retried on the next run
