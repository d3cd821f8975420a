"""A root planned in slices (issue 23: a 100k-file run held its whole plan at once).

The walk yields files in doc_id order and resumes after any of them, so a root's plan can
be made ``files_per_slice`` files at a time. These check that slicing changes nothing a run
does: the files walked (order, problems, second links), the plan, the summary and the index
(adds, changes, deletions of gone files in full mode; unreadable folders kept:
tests/ingest/test_sec_unreadable_kept.py), and that a
slice holds at most its share of the files."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from kbtest import write_tree
from kbsync.ingest.discover import discover, parse_root
from kbsync.ingest.plan import plan_root
from kbsync.ingest.runner import run_plain
from kbsync.ingest.walk import Discovery, WalkRules, iter_files
from kbsync.models import PlanAction, SyncMode

# Names whose doc_id order differs from a walk that lists a folder's files before its
# subfolders: '-', '.', ' ' and '0' sort around '/'.
TRICKY = {
    "a.md": "a", "a-b.md": "ab", "a/x.md": "ax", "a/z/deep.md": "deep", "a b/y.md": "aby",
    "a0.md": "a0", "a.d/q.md": "adq", "b.md": "b", "b/c/d/e.md": "e", "b/c.md": "bc",
    "ü/ä.md": "umlaut", "z.md": "z", ".hidden/h.md": "h", "notes.txt": "t",
}


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    share = tmp_path / "share"
    write_tree(share, files)
    return share


def _walk(share: Path, **kwargs) -> tuple[list[str], Discovery]:
    found = Discovery(root=parse_root(str(share)))
    return [f.doc_id for f in iter_files(found, WalkRules(), **kwargs)], found


def test_the_walk_yields_doc_id_order_without_sorting(tmp_path):
    share = _tree(tmp_path, TRICKY)
    walked, _found = _walk(share)
    assert walked == sorted(walked)
    assert walked == [f.doc_id for f in discover(parse_root(str(share))).files]
    assert "share/.hidden/h.md" not in walked and len(walked) == len(TRICKY) - 1


def test_a_walk_resumed_after_any_file_yields_the_rest(tmp_path):
    share = _tree(tmp_path, TRICKY)
    (share / "b" / "alias").symlink_to(share / "a", target_is_directory=True)  # second link
    (share / "a" / "loop").symlink_to(share / "a", target_is_directory=True)
    (share / "out").symlink_to(tmp_path, target_is_directory=True)  # outside: a problem
    whole, found = _walk(share)
    assert not any("/alias/" in d or "/loop/" in d for d in whole)
    for cut in range(1, len(whole)):
        head = Discovery(root=found.root)
        visited: set = set()
        walked = iter_files(head, WalkRules(), visited=visited)
        first = [next(walked).doc_id for _ in range(cut)]
        rest, tail = _walk(share, after=first[-1].split("/", 1)[1], visited=visited)
        assert first + rest == whole, cut
        assert len(head.problems) + len(tail.problems) == len(found.problems) == 1, cut


def test_slices_hold_their_share_and_add_up_to_the_whole_plan(runtime, tmp_path):
    share = _tree(tmp_path, {f"d{i % 3}/n{i:03d}.md": f"# N {i}\n\nbody {i}" for i in range(23)})
    root = parse_root(str(share))
    whole = plan_root(root, runtime=runtime, namespace="default", mode=SyncMode.FULL)
    assert whole.cursor is None
    items, cursor, slices = [], None, 0
    while True:
        rp = plan_root(root, runtime=runtime, namespace="default", mode=SyncMode.FULL,
                       cursor=cursor, limit=5)
        slices += 1
        assert len(rp.plan.items) <= 5
        items += [(i.action, i.doc_id, i.file.content_hash) for i in rp.plan.items]
        cursor = rp.cursor
        if cursor is None:
            break
    assert slices == 5  # 23 files: four full slices and the rest
    assert items == [(i.action, i.doc_id, i.file.content_hash) for i in whole.plan.items]


def _run(runtime, share: Path, **kwargs) -> dict:
    summary = run_plain([parse_root(str(share))], runtime=runtime, **kwargs).to_dict()
    return {k: v for k, v in summary.items() if k not in ("run_id", "duration_s", "stage_s")}


def _index(runtime) -> dict[str, dict]:
    return {p.id: p.payload for p in runtime.store.scroll(runtime.collection)}


def _states(runtime) -> dict[str, tuple]:
    return {d: (s.content_hash, s.chunk_count, s.status)
            for d, s in runtime.states.load("default").items()}


@pytest.fixture
def sliced(settings, monkeypatch):
    """A runtime whose roots are planned 4 files at a time."""
    from kbsync.runtime import Runtime
    from kbsync.settings import Settings

    monkeypatch.setenv("KBSYNC_PLAN_SLICE_FILES", "4")
    monkeypatch.setenv("KBSYNC_HOME", str(Path(os.environ["KBSYNC_HOME"]).parent / "sliced"))
    rt = Runtime.open(Settings())
    assert rt.config.files_per_slice == 4
    yield rt
    rt.close()


def test_a_sliced_run_builds_the_same_index_as_a_whole_one(runtime, sliced, tmp_path):
    files = {f"d{i % 4}/n{i:03d}.md": f"# Note {i}\n\nbody text {i}" for i in range(18)}
    share = _tree(tmp_path, files)
    steps = [
        lambda: None,  # first ingest
        lambda: (share / "d1/n005.md").write_text("# Note 5\n\nchanged"),
        lambda: [(share / f"d2/n{i:03d}.md").unlink() for i in (2, 6, 10)],  # gone, full mode
        lambda: None,  # a no-op
    ]
    for step in steps:
        step()
        whole = _run(runtime, share, mode=SyncMode.FULL)
        in_slices = _run(sliced, share, mode=SyncMode.FULL)
        assert in_slices == whole
        assert _index(sliced) == _index(runtime) and _states(sliced) == _states(runtime)
    assert whole["unchanged"] == 15 and len(_states(runtime)) == 15


def test_a_sliced_dry_run_counts_what_a_whole_one_does(runtime, sliced, tmp_path):
    share = _tree(tmp_path, {f"n{i:02d}.md": f"# {i}" for i in range(10)})
    _run(runtime, share)
    _run(sliced, share)
    for name in ("n01.md", "n07.md"):
        (share / name).unlink()
    (share / "n03.md").write_text("# changed")
    (share / "new.md").write_text("# new")
    whole = _run(runtime, share, mode=SyncMode.FULL, dry_run=True)
    assert _run(sliced, share, mode=SyncMode.FULL, dry_run=True) == whole
    assert (whole["added"], whole["updated"], whole["deleted"]) == (1, 1, 2)


def test_the_last_slice_alone_finds_the_missing(runtime, tmp_path):
    share = _tree(tmp_path, {f"n{i:02d}.md": f"# {i}" for i in range(9)})
    _run(runtime, share)
    (share / "n04.md").unlink()
    root = parse_root(str(share))
    cursor, actions = None, []
    while True:
        rp = plan_root(root, runtime=runtime, namespace="default", mode=SyncMode.FULL,
                       cursor=cursor, limit=4)  # 8 files: two full slices, an empty one
        actions.append(sorted({i.action for i in rp.plan.items}))
        if rp.cursor is None:
            break
        assert rp.to_delete == [] and not rp.plan.of(PlanAction.MISSING)
        cursor = rp.cursor
    assert actions[-1] == [PlanAction.MISSING] and rp.to_delete == ["share/n04.md"]


def test_the_next_slice_leaves_the_held_cursor_as_it_was(runtime, tmp_path):
    """A caller may still hold (and pickle) a slice's cursor while the next slice is
    planned: ``seen`` (8 bytes a file) grows on the next slice's copy, never on it."""
    share = _tree(tmp_path, {f"n{i:02d}.md": f"# {i}" for i in range(9)})
    root = parse_root(str(share))
    first = plan_root(root, runtime=runtime, namespace="default", mode=SyncMode.FULL, limit=4)
    assert first.cursor is not None
    held = bytes(first.cursor.seen)
    assert len(held) == 4 * 8
    second = plan_root(root, runtime=runtime, namespace="default", mode=SyncMode.FULL,
                       cursor=first.cursor, limit=4)
    assert second.cursor is not None and len(second.cursor.seen) == 8
    assert bytes(first.cursor.seen) == held
    assert pickle.loads(pickle.dumps(second.cursor)).seen == second.cursor.seen


def test_a_slice_reads_its_own_records_alike_on_both_adapters(adapter_runtime):
    """``StateStore.load_docs``: by record id on the embedded store, a filtered scroll on a
    server; either way only the namespace's records of the doc_ids asked for."""
    from kbsync.models import DocState, DocStatus

    states = adapter_runtime.states

    def record(namespace: str, doc_id: str) -> DocState:
        return DocState(doc_id=doc_id, namespace=namespace, root="r", path=f"/s/{doc_id}",
                        content_hash=doc_id, fingerprint="f", chunk_count=1,
                        status=DocStatus.OK, updated_at="2026-12-03T00:00:00+00:00",
                        run_id="run", size=1, mtime_ns=1)

    states.commit([record("a", f"r/n{i}.md") for i in range(7)] + [record("b", "r/n1.md")])
    asked = ["r/n1.md", "r/n5.md", "r/none.md", "r/n6.md"]
    loaded = states.load_docs("a", asked, per_query=2)
    assert sorted(loaded) == ["r/n1.md", "r/n5.md", "r/n6.md"]
    assert all(s.namespace == "a" for s in loaded.values())
    assert loaded == {d: s for d, s in states.load("a").items() if d in asked}
    assert states.load_docs("b", asked) == {"r/n1.md": record("b", "r/n1.md")}
