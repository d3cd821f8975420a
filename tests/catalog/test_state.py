"""kbsync.catalog.state and kbsync.ingest.classify: the plan rules, the settings fingerprint and the state records.

The plan is computed from real files (found by :func:`discover`) against hand-made
records; the records live in the real embedded store. Planning writes nothing and
reads a file only when its stat or the settings changed: ``Plan.hashed`` counts
those reads, and a file deleted after discovery proves one was not read.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kbsync.errors import ErrorCode
from kbsync.ingest.discover import discover, hash_file, parse_root
from kbsync.catalog.state import REPAIR_FINGERPRINT, StateStore, fingerprint, is_meta, stable_hash
from kbsync.ingest.classify import plan_files
from kbsync.models import DocState, DocStatus, PlanAction, SourceFile
from kbsync.store.edge.store import EdgeStore
from kbtest import write_tree

FP = fingerprint(converter="c1", chunker="k1", chunk_tokens=400, provider="hash", dimension=8)


def found(share: Path) -> list[SourceFile]:
    """The files of ``share`` as an ingest finds them (sorted by doc_id, no hash yet)."""
    return discover(parse_root(str(share))).files


def record(source: SourceFile, *, fingerprint: str = FP, status: DocStatus = DocStatus.OK,
           content_hash: str | None = None, mtime_ns: int | None = None,
           namespace: str = "default") -> DocState:
    """The record a previous run would have committed for ``source`` (same bytes, same stat)."""
    return DocState(doc_id=source.doc_id, namespace=namespace, root=source.root,
                    path=source.display,
                    content_hash=content_hash or hash_file(source.path),
                    fingerprint=fingerprint, chunk_count=1, status=status,
                    updated_at="2026-01-01T00:00:00+00:00", run_id="run-1", size=source.size,
                    mtime_ns=source.mtime_ns if mtime_ns is None else mtime_ns)


def actions(plan) -> dict[str, str]:
    return {item.doc_id: item.action.value for item in plan.items}


@pytest.fixture
def share(tmp_path) -> Path:
    root = tmp_path / "share"
    write_tree(root, {"a.md": "# A\n\nalpha", "b.md": "# B\n\nbravo", "c.md": "# C\n\ncharlie"})
    return root


# -- the plan rules ------------------------------------------------------------------------------
def test_every_rule_in_one_plan(tmp_path):
    root = tmp_path / "share"
    write_tree(root, {"new.md": "new", "same.md": "same", "touched.md": "touched",
                      "edited.md": "edited now", "partial.md": "partial"})
    files = {f.rel_path: f for f in found(root)}
    gone = SourceFile(doc_id="share/gone.md", root="share", path=root / "gone.md",
                      rel_path="gone.md", size=4, mtime_ns=1)
    states = {
        "share/same.md": record(files["same.md"]),
        "share/touched.md": record(files["touched.md"], mtime_ns=1),  # touched, same bytes
        "share/edited.md": record(files["edited.md"], content_hash="0" * 64, mtime_ns=1),
        "share/partial.md": record(files["partial.md"], status=DocStatus.PARTIAL),
        "share/gone.md": record(gone, content_hash="1" * 64),
    }
    plan = plan_files(list(files.values()), states, fingerprint=FP)
    assert actions(plan) == {
        "share/edited.md": "changed", "share/new.md": "new", "share/partial.md": "heal",
        "share/same.md": "unchanged", "share/touched.md": "unchanged",
        "share/gone.md": "missing"}
    assert plan.counts() == {"new": 1, "changed": 1, "unchanged": 2, "heal": 1, "missing": 1}
    assert plan.hashed == 3  # new, touched, edited: the others were judged by their stat
    assert plan.failures == [] and not any(item.repair for item in plan.items)
    # Every file goes on with its content hash; a missing document with its last record.
    for item in plan.items:
        if item.action is PlanAction.MISSING:
            assert item.file is None and item.previous is states["share/gone.md"]
        else:
            assert item.file.content_hash == hash_file(item.file.path)
            assert item.previous is states.get(item.doc_id)


def test_the_stat_fast_path_trusts_the_record_and_reads_nothing(share):
    files = found(share)
    states = {f.doc_id: record(f, content_hash=f"recorded-{f.rel_path}") for f in files}
    for source in files:
        os.remove(source.path)  # a read would now fail
    plan = plan_files(files, states, fingerprint=FP)
    assert actions(plan) == dict.fromkeys(states, "unchanged")
    assert plan.hashed == 0 and plan.failures == []
    assert [i.file.content_hash for i in plan.items] == [
        "recorded-a.md", "recorded-b.md", "recorded-c.md"]


def test_a_touched_file_is_hashed_and_unchanged_when_its_bytes_are(share):
    files = found(share)
    states = {f.doc_id: record(f) for f in files}
    target = share / "b.md"
    os.utime(target, ns=(target.stat().st_atime_ns, target.stat().st_mtime_ns + 10**9))
    plan = plan_files(found(share), states, fingerprint=FP)
    assert actions(plan) == dict.fromkeys(states, "unchanged") and plan.hashed == 1


def test_an_edited_file_of_the_same_size_is_changed(share):
    states = {f.doc_id: record(f) for f in found(share)}
    (share / "c.md").write_text("# C\n\nCHARLIE", encoding="utf-8")  # same length
    os.utime(share / "c.md", ns=(1, 2))
    plan = plan_files(found(share), states, fingerprint=FP)
    assert actions(plan) == {"share/a.md": "unchanged", "share/b.md": "unchanged",
                             "share/c.md": "changed"}
    assert plan.of(PlanAction.CHANGED)[0].file.content_hash == hash_file(share / "c.md")


def test_new_settings_reprocess_every_document_partial_ones_included(share):
    files = found(share)
    states = {f.doc_id: record(f, status=DocStatus.PARTIAL if f.rel_path == "a.md"
                               else DocStatus.OK) for f in files}
    other = fingerprint(converter="c1", chunker="k1", chunk_tokens=200, provider="hash",
                        dimension=8)
    plan = plan_files(files, states, fingerprint=other)
    assert actions(plan) == dict.fromkeys(states, "changed")
    assert plan.hashed == 3 and not any(item.repair for item in plan.items)


def test_force_reprocesses_and_reads_every_file(share):
    files = found(share)
    states = {f.doc_id: record(f) for f in files}
    plan = plan_files(files, states, fingerprint=FP, force=True)
    assert actions(plan) == dict.fromkeys(states, "changed") and plan.hashed == 3


def test_a_partial_document_with_new_bytes_is_changed_not_healed(share):
    states = {f.doc_id: record(f, status=DocStatus.PARTIAL) for f in found(share)}
    (share / "a.md").write_text("# A\n\nalpha, rewritten", encoding="utf-8")
    plan = plan_files(found(share), states, fingerprint=FP)
    assert actions(plan) == {"share/a.md": "changed", "share/b.md": "heal",
                             "share/c.md": "heal"}


def test_repair_requests_reprocess_whatever_the_bytes(share):
    files = found(share)
    states = {f.doc_id: record(f) for f in files}
    states["share/b.md"] = record(files[1], fingerprint=REPAIR_FINGERPRINT)
    states["share/c.md"] = record(files[2], status=DocStatus.PARTIAL)
    plan = plan_files(files, states, fingerprint=FP,
                      repair={"share/c.md", "share/not-recorded.md"})
    assert [(i.doc_id, i.action.value, i.repair) for i in plan.items] == [
        ("share/a.md", "unchanged", False),
        ("share/b.md", "changed", True),  # the record verify --repair left
        ("share/c.md", "changed", True),  # named by the caller: not a heal
    ]
    assert plan.hashed == 2


def test_repair_of_a_document_without_a_record_is_just_new(share):
    plan = plan_files(found(share), {}, fingerprint=FP, repair={"share/a.md"})
    assert actions(plan) == dict.fromkeys(["share/a.md", "share/b.md", "share/c.md"], "new")
    assert not any(item.repair for item in plan.items)


def test_an_unreadable_file_is_one_failure_and_keeps_its_record(share):
    files = found(share)
    states = {f.doc_id: record(f, mtime_ns=1) for f in files if f.rel_path != "c.md"}
    os.remove(share / "b.md")  # recorded, stat changed: must be read, cannot be
    os.remove(share / "c.md")  # not recorded: must be read, cannot be
    plan = plan_files(files, states, fingerprint=FP)
    assert actions(plan) == {"share/a.md": "unchanged"}  # b is neither changed nor missing
    assert [(f.doc_id, f.error) for f in plan.failures] == [
        ("share/b.md", ErrorCode.PermissionDenied), ("share/c.md", ErrorCode.PermissionDenied)]
    assert all("cannot read" in f.message and "\n" not in f.message for f in plan.failures)
    assert plan.hashed == 1


def test_missing_documents_come_last_in_doc_id_order(share):
    files = found(share)
    ghosts = [SourceFile(doc_id=f"share/{n}.md", root="share", path=share / f"{n}.md",
                         rel_path=f"{n}.md", size=1, mtime_ns=1) for n in ("z", "m", "d")]
    states = {g.doc_id: record(g, content_hash="2" * 64) for g in ghosts}
    plan = plan_files(files[:1], states, fingerprint=FP)
    assert [(i.doc_id, i.action.value) for i in plan.items] == [
        ("share/a.md", "new"), ("share/d.md", "missing"), ("share/m.md", "missing"),
        ("share/z.md", "missing")]
    assert [i.doc_id for i in plan.of(PlanAction.MISSING)] == [
        "share/d.md", "share/m.md", "share/z.md"]


def test_an_empty_share_against_no_records_is_an_empty_plan():
    plan = plan_files([], {}, fingerprint=FP)
    assert plan.items == [] and plan.hashed == 0
    assert plan.counts() == {"new": 0, "changed": 0, "unchanged": 0, "heal": 0, "missing": 0}


# -- fingerprint -----------------------------------------------------------------------------------
SHAPING = {"converter": "c1", "chunker": "k1", "chunk_tokens": 400, "chunk_overlap": 60,
           "chunk_max_chars": 4000, "sparse": "s1", "provider": "hash", "model": "hash-8",
           "dimension": 8}


def test_fingerprint_is_short_hex_and_ignores_argument_order():
    value = fingerprint(**SHAPING)
    assert len(value) == 32 and int(value, 16) >= 0
    assert fingerprint(**dict(reversed(list(SHAPING.items())))) == value
    assert stable_hash({"b": 1, "a": [1, "é"]}) == stable_hash({"a": [1, "é"], "b": 1})


@pytest.mark.parametrize("key, other", [
    ("converter", "c2"), ("chunker", "k2"), ("chunk_tokens", 401), ("chunk_overlap", 0),
    ("chunk_max_chars", 3999), ("sparse", "s2"), ("provider", "openai"), ("model", "hash-9"),
    ("dimension", 9), ("chunk_tokens", "400"),
])
def test_every_shaping_value_changes_the_fingerprint(key, other):
    assert fingerprint(**{**SHAPING, key: other}) != fingerprint(**SHAPING)


def test_an_added_shaping_key_changes_the_fingerprint():
    assert fingerprint(**SHAPING, chunk_fit="minilm") != fingerprint(**SHAPING)


# -- the records -----------------------------------------------------------------------------------
@pytest.fixture
def states(tmp_path):
    with EdgeStore(tmp_path / "qdrant") as store:
        yield StateStore(store, "kb_state")


def test_reads_of_a_store_without_records_answer_empty(states):
    assert states.load("default") == {} and states.get("default", "x/a.md") is None
    assert states.namespaces() == {} and states.read_meta("root_binding") == []
    assert states.any_record("default", "x") is None
    states.remove("default", ["x/a.md"])  # nothing to remove is not an error
    states.commit([])  # nor is nothing to commit


def test_records_round_trip_and_are_filtered_by_namespace_and_root(states, share, tmp_path):
    other = tmp_path / "other"
    write_tree(other, {"o.md": "other"})
    a, b, _ = found(share)
    (o,) = found(other)
    committed = [record(a), record(b, status=DocStatus.PARTIAL), record(o),
                 record(a, namespace="agent")]
    states.commit(committed)
    assert states.load("default") == {s.doc_id: s for s in committed[:3]}
    assert states.load("default", root="other") == {"other/o.md": committed[2]}
    assert states.load("agent") == {"share/a.md": committed[3]}
    assert states.get("default", "share/b.md") == committed[1]
    assert states.get("nobody", "share/a.md") is None
    assert states.any_record("default", "other") == committed[2]
    assert states.namespaces() == {"default": {"documents": 3, "partial": 1},
                                   "agent": {"documents": 1, "partial": 0}}


def test_a_commit_replaces_the_record_and_remove_deletes_only_its_namespace(states, share):
    a, b, _ = found(share)
    states.commit([record(a), record(b), record(a, namespace="agent")])
    newer = record(a, content_hash="3" * 64)
    states.commit([newer])
    assert states.get("default", "share/a.md") == newer
    assert states.record_id("default", "share/a.md") == StateStore.record_id(
        "default", "share/a.md") != StateStore.record_id("agent", "share/a.md")
    states.remove("default", ["share/a.md"])
    assert set(states.load("default")) == {"share/b.md"}
    assert set(states.load("agent")) == {"share/a.md"}


def test_meta_records_are_skipped_by_every_document_read(states, share):
    (a, *_) = found(share)
    states.write_meta("root_binding", ["default", "share"],
                      {"namespace_key": "default", "root": "share", "path": "/srv/share"})
    states.write_meta("embedder", ["kb"], {"model": "hash-8"})
    assert states.load("default") == {} and states.namespaces() == {}
    assert states.any_record("default", "share") is None
    states.commit([record(a)])
    assert list(states.load("default")) == ["share/a.md"]
    assert states.namespaces() == {"default": {"documents": 1, "partial": 0}}
    [binding] = states.read_meta("root_binding", root="share")
    assert is_meta(binding) and binding["path"] == "/srv/share"
    assert states.read_meta("root_binding", root="elsewhere") == []
    # Writing the same (kind, key) again replaces the record.
    states.write_meta("root_binding", ["default", "share"],
                      {"namespace_key": "default", "root": "share", "path": "/mnt/share"})
    assert [m["path"] for m in states.read_meta("root_binding")] == ["/mnt/share"]
    assert [m["model"] for m in states.read_meta("embedder")] == ["hash-8"]


def test_a_record_id_is_the_uuid5_it_always_was():
    """``record_id`` spells uuid5 out for speed: the ids of existing records must not move."""
    import json
    import uuid

    from kbsync.catalog.state import STATE_NAMESPACE

    for namespace, doc_id in [("default", "share/a.md"), ("ns", "r/ü/lat\\xe9 x.md"),
                              ("", ""), ("a" * 300, "r/" + "b" * 900)]:
        expected = str(uuid.uuid5(STATE_NAMESPACE, json.dumps([namespace, doc_id])))
        assert StateStore.record_id(namespace, doc_id) == expected
