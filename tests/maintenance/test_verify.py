"""The store no longer holds what the state says (issue 10.3): damage a real store, then
check that every ingest notices and repairs it, and that ``kbsync verify`` reports and
``--repair`` fixes each kind of drift.

Damage is done the way it happens: the embedded engine's collection folder removed, a
segment's id-tracker file truncated or overwritten (qdrant-edge-py), points deleted or
rewritten through the store API (qdrant-client local mode and the edge adapter).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections import Counter
from pathlib import Path

import pytest

from kbtest import write_tree
from kbsync.app import cli
from kbsync.text.chunk import chunk_budget
from kbsync.ingest.discover import parse_root
from kbsync.embed import build_embedding_service
from kbsync.ingest.runner import run_plain
from kbsync.models import DocStatus
from kbsync.maintenance.repair import repair
from kbsync.runtime import Runtime
from kbsync.text.sparse import encode_document
from kbsync.catalog.state import StateStore
from kbsync.store.base import Filter, Point
from kbsync.catalog.checks import check_root
from kbsync.maintenance.verify import verify

N_DOCS = 12


def docs(n: int = N_DOCS) -> dict[str, str]:
    files = {f"d{i:02d}.md": f"# Title {i}\n\nUnique body text number {i} about topic-{i}."
             for i in range(n)}
    # One document of several chunks, to lose a single point of it.
    files["long.md"] = "\n\n".join(f"## Part {j}\n\n" + " ".join(
        f"word{j}x{k}" for k in range(300)) for j in range(4))
    return files


def ingest(runtime, share: Path, **kwargs) -> dict:
    return run_plain([parse_root(str(share))], runtime=runtime, **kwargs).to_dict()


def chunk_points(runtime, **where) -> list[Point]:
    return list(runtime.store.scroll(runtime.collection, Filter.where(namespace="default",
                                                                      **where),
                                     with_vectors=True))


def drift_of(runtime) -> dict:
    report = verify(runtime.store, collection=runtime.collection,
                    state_collection=runtime.settings.state_collection)
    return {kind: sorted(entry["doc_ids"]) for kind, entry in
            report.to_dict()["namespaces"].get("default", {"drift": {}})["drift"].items()}


def root_check(runtime):
    return check_root(runtime.store, runtime.collection, "default", "share",
                      runtime.states.load("default", "share"))


@pytest.fixture
def share(tmp_path) -> Path:
    root = tmp_path / "share"
    write_tree(root, docs())
    return root


def _segment_files(settings, name: str) -> list[Path]:
    return sorted((settings.store_path / settings.collection / "segments").glob(f"*/{name}"))


# --- every ingest checks the store against the state ---------------------------------------
def test_ingest_rebuilds_a_removed_collection_folder(settings, share):
    with_runtime = Runtime.open(settings)
    first = ingest(with_runtime, share)
    with_runtime.close()
    total = first["chunks_kept"]
    assert first["added"] == N_DOCS + 1 and total > N_DOCS + 1
    shutil.rmtree(settings.store_path / settings.collection)

    runtime = Runtime.open(settings)
    try:
        second = ingest(runtime, share)
        assert (second["repaired"], second["updated"], second["unchanged"]) == (
            N_DOCS + 1, N_DOCS + 1, 0)
        # The embedding cache makes the rebuild cheap: nothing is embedded again.
        assert second["embeddings_computed"] == 0 and second["embeddings_cached"] == total
        assert any("store drift" in w and "missing" in w for w in second["warnings"])
        assert runtime.store.count(runtime.collection) == total
        assert drift_of(runtime) == {}
        third = ingest(runtime, share)
        assert (third["repaired"], third["unchanged"]) == (0, N_DOCS + 1)
        assert not any("drift" in w for w in third["warnings"])
    finally:
        runtime.close()


def test_ingest_repairs_a_truncated_id_tracker(settings, share):
    runtime = Runtime.open(settings)
    total = ingest(runtime, share)["chunks_kept"]
    runtime.close()
    trackers = _segment_files(settings, "mutable_id_tracker.mappings")
    assert trackers
    for tracker in trackers:
        os.truncate(tracker, tracker.stat().st_size // 4)

    runtime = Runtime.open(settings)
    try:
        left = runtime.store.count(runtime.collection)
        assert left < total  # the engine opens it and silently lost points
        lost_docs = sorted(set(drift_of(runtime)["missing_points"]))
        again = ingest(runtime, share)
        assert again["repaired"] == len(lost_docs) > 0
        assert again["unchanged"] == N_DOCS + 1 - len(lost_docs)
        assert any("store drift" in w for w in again["warnings"])
        assert runtime.store.count(runtime.collection) == total
        assert drift_of(runtime) == {}
    finally:
        runtime.close()


def _local_runtime(settings, path: Path) -> Runtime:
    from kbsync.store.server.store import ServerStore

    store = ServerStore.local(path)
    return Runtime(settings=settings, store=store,
                   states=StateStore(store, settings.state_collection),
                   service=build_embedding_service(settings),
                   chunk_config=chunk_budget(None, tokens=settings.chunk_tokens,
                                             overlap=settings.chunk_overlap))


def test_ingest_repairs_points_deleted_through_the_store_api_in_local_mode(settings, share,
                                                                           tmp_path):
    runtime = _local_runtime(settings, tmp_path / "local")
    try:
        first = ingest(runtime, share)
        long_points = chunk_points(runtime, doc_id="share/long.md")
        assert len(long_points) > 1
        runtime.store.delete(runtime.collection, Filter.where(doc_id="share/d03.md"))
        runtime.store.delete(runtime.collection, Filter.where(doc_id="share/d07.md"))
        runtime.store.delete_ids(runtime.collection, [long_points[1].id])
        assert drift_of(runtime) == {"missing_points": ["share/d03.md", "share/d07.md",
                                                        "share/long.md"]}
        again = ingest(runtime, share)
        assert (again["repaired"], again["updated"]) == (3, 3)
        assert again["unchanged"] == N_DOCS + 1 - 3
        assert runtime.store.count(runtime.collection) == first["chunks_kept"]
        assert drift_of(runtime) == {}
    finally:
        runtime.close()


def test_dry_run_reports_the_repair_and_writes_nothing(settings, share):
    runtime = Runtime.open(settings)
    try:
        ingest(runtime, share)
        runtime.store.delete(runtime.collection, Filter.where(doc_id="share/d01.md"))
        planned = ingest(runtime, share, dry_run=True)
        assert (planned["repaired"], planned["updated"]) == (1, 1)
        assert drift_of(runtime) == {"missing_points": ["share/d01.md"]}
    finally:
        runtime.close()


class ScrollCounter:
    """The real store with its ``scroll`` calls counted per collection (instrumentation:
    every call goes through to the real engine)."""

    def __init__(self, store) -> None:
        self._store = store
        self.scrolls: Counter = Counter()

    def scroll(self, name, *args, **kwargs):
        self.scrolls[name] += 1
        return self._store.scroll(name, *args, **kwargs)

    def __getattr__(self, attr):
        return getattr(self._store, attr)


def test_the_check_reads_no_chunk_point_when_the_store_matches(settings, share):
    real = Runtime.open(settings)
    counted = ScrollCounter(real.store)
    runtime = Runtime(settings=settings, store=counted,
                      states=StateStore(counted, settings.state_collection),
                      service=real.service, chunk_config=real.chunk_config)
    try:
        ingest(runtime, share)
        counted.scrolls.clear()
        noop = ingest(runtime, share)
        assert noop["unchanged"] == N_DOCS + 1 and noop["repaired"] == 0
        assert counted.scrolls[settings.collection] == 0
        assert root_check(runtime).matches
    finally:
        real.close()


# --- kbsync verify: every kind of drift ----------------------------------------------------
def _rewrite(runtime, point: Point, *, new_id: str | None = None, **payload) -> None:
    body = {**point.payload, **payload}
    runtime.store.upsert(runtime.collection, [Point(id=new_id or point.id, payload=body,
                                                    vector=point.vector,
                                                    sparse=encode_document(body["text"]))])


def _damage_every_way(runtime) -> None:
    gone = chunk_points(runtime, doc_id="share/d00.md")
    runtime.store.delete_ids(runtime.collection, [p.id for p in gone])  # missing_points
    [extra] = chunk_points(runtime, doc_id="share/d01.md")
    _rewrite(runtime, extra, new_id=str(uuid.uuid4()))  # a second point, foreign id
    [flag] = chunk_points(runtime, doc_id="share/d02.md")
    _rewrite(runtime, flag, embedding_failed=True)  # flagged on an `ok` document
    [moved] = chunk_points(runtime, doc_id="share/d03.md")
    runtime.store.delete_ids(runtime.collection, [moved.id])
    _rewrite(runtime, moved, new_id=str(uuid.uuid4()))  # same count, wrong id
    long_point = chunk_points(runtime, doc_id="share/long.md")[0]
    _rewrite(runtime, long_point, chunk_index=99)  # index out of 0..n-1
    _rewrite(runtime, extra, new_id=str(uuid.uuid4()), doc_id="share/ghost.md")  # orphan


EVERY_KIND = {
    "missing_points": ["share/d00.md"],
    "extra_points": ["share/d01.md"],
    "bad_chunk_index": ["share/d01.md", "share/long.md"],  # d01: index 0 twice
    "wrong_ids": ["share/d01.md", "share/d03.md", "share/long.md"],
    "flagged_points": ["share/d02.md"],
    "orphan_points": ["share/ghost.md"],
}


def test_verify_reports_each_kind_of_drift_and_repair_fixes_it(settings, share):
    runtime = Runtime.open(settings)
    try:
        ingest(runtime, share)
        assert drift_of(runtime) == {}  # meta records (root binding, embedder) are no drift
        _damage_every_way(runtime)
        assert drift_of(runtime) == EVERY_KIND
        report = verify(runtime.store, collection=runtime.collection,
                        state_collection=settings.state_collection, namespace="default")
        assert report.drifted() == 6
        assert report.to_dict()["namespaces"]["default"]["drift"]["missing_points"] == {
            "documents": 1, "points": 1, "doc_ids": ["share/d00.md"]}
        done, after = repair(runtime, report, namespace="default")
        assert (done.orphans_deleted, done.marked, done.reprocessed, done.kept) == (1, 5, 5, [])
        assert after.drifted() == 0 and drift_of(runtime) == {}
        assert runtime.states.get("default", "share/d02.md").status is DocStatus.OK
        rerun = ingest(runtime, share)
        assert (rerun["unchanged"], rerun["repaired"]) == (N_DOCS + 1, 0)
    finally:
        runtime.close()


def test_drift_that_keeps_the_totals_is_found_by_verify(settings, share):
    runtime = Runtime.open(settings)
    try:
        ingest(runtime, share)
        [lost] = chunk_points(runtime, doc_id="share/d04.md")
        runtime.store.delete_ids(runtime.collection, [lost.id])
        _rewrite(runtime, lost, new_id=str(uuid.uuid4()), doc_id="share/ghost.md")
        assert root_check(runtime).matches  # the cheap check cannot see it
        assert drift_of(runtime) == {"missing_points": ["share/d04.md"],
                                     "orphan_points": ["share/ghost.md"]}
    finally:
        runtime.close()


def test_repair_keeps_a_drifted_document_whose_file_is_gone(settings, share):
    runtime = Runtime.open(settings)
    try:
        ingest(runtime, share)
        [point] = chunk_points(runtime, doc_id="share/d05.md")
        _rewrite(runtime, point, new_id=str(uuid.uuid4()))  # extra point
        (share / "d05.md").unlink()
        report = verify(runtime.store, collection=runtime.collection,
                        state_collection=settings.state_collection)
        done, after = repair(runtime, report)
        assert done.kept == ["share/d05.md"] and done.reprocessed == 0
        assert after.drifted() == 1  # reported, and exit 3 from the CLI
        assert len(chunk_points(runtime, doc_id="share/d05.md")) == 2  # nothing lost
        assert runtime.states.get("default", "share/d05.md") is not None
        again = ingest(runtime, share)
        assert any("no file to rebuild" in w and "kbsync verify" in w for w in again["warnings"])
        assert len(chunk_points(runtime, doc_id="share/d05.md")) == 2
    finally:
        runtime.close()


def test_verify_skips_records_that_are_not_documents(settings, share):
    runtime = Runtime.open(settings)
    try:
        ingest(runtime, share)
        runtime.states.write_meta("other-kind", ("x",), {"namespace": "default",
                                                         "chunk_count": 5})
        runtime.store.upsert(settings.state_collection, [Point(
            id=str(uuid.uuid4()), vector=[1.0],
            payload={"namespace": "default", "kind": "future-meta", "doc_id": "share/zz.md",
                     "chunk_count": 3})])
        assert drift_of(runtime) == {}
        assert root_check(runtime).matches
    finally:
        runtime.close()


# --- the command ----------------------------------------------------------------------------
def run_cli(capsys, *args: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = cli.main(["verify", *args, "--json"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out)


def test_verify_command_exit_codes_and_json(settings, share, capsys):
    runtime = Runtime.open(settings)
    ingest(runtime, share)
    runtime.close()
    code, clean = run_cli(capsys)
    assert code == 0 and clean["drifted"] == 0 and clean["remaining"] == 0
    assert clean["namespaces"]["default"]["documents"] == N_DOCS + 1
    assert clean["repair"] is None

    runtime = Runtime.open(settings)
    _damage_every_way(runtime)
    runtime.close()
    code, found = run_cli(capsys)
    assert code == 3
    assert {k: v["doc_ids"] for k, v in found["namespaces"]["default"]["drift"].items()} \
        == EVERY_KIND
    assert set(found) == {"collection", "collection_missing", "drifted", "namespaces", "repair",
                          "remaining", "pending_removals", "removals_finished",
                          "unserved_collections", "damaged", "unreadable", "set_aside",
                          "state_rebuilt"}

    code, fixed = run_cli(capsys, "--repair", "--namespace", "default")
    assert code == 0 and fixed["remaining"] == 0
    assert fixed["repair"]["orphans_deleted"] == 1 and fixed["repair"]["reprocessed"] == 5
    assert run_cli(capsys)[0] == 0


def test_an_unreadable_collection_is_one_line_and_repair_rebuilds_it(settings, share, capsys):
    runtime = Runtime.open(settings)
    total = ingest(runtime, share)["chunks_kept"]
    runtime.close()
    # Damage the engine reports in one line (malformed entries). Not random bytes: with one
    # draw of them the engine aborted the whole process in its load (SIGABRT: a CI worker died).
    for tracker in _segment_files(settings, "mutable_id_tracker.mappings"):
        tracker.write_bytes(b"\xff" * tracker.stat().st_size)
    code, found = run_cli(capsys)  # named in the report (exit 3), not a failure
    assert code == 3 and str(settings.store_path / settings.collection) in found["unreadable"]
    assert "kbsync verify --repair" in found["unreadable"]

    code, fixed = run_cli(capsys, "--repair")
    assert code == 0 and fixed["collection_missing"] and fixed["remaining"] == 0
    aside = Path(fixed["repair"]["set_aside"])
    assert aside.is_dir() and aside.parent == settings.store_path  # kept, never deleted
    runtime = Runtime.open(settings)
    try:
        assert runtime.store.count(runtime.collection) == total
        assert ingest(runtime, share)["unchanged"] == N_DOCS + 1
    finally:
        runtime.close()
