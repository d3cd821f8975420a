"""Issue 22: the same files under two names across runs, and a root inside KBSYNC_HOME.

Within one run overlapping roots were refused already; across runs only the root bindings
remember what was synced, so ``ingest "my docs"`` then ``ingest "my docs/d1"`` (or a symlink
and the folder it names) indexed d1 twice. Runs go through ``run_plain`` on both adapters.
"""

from __future__ import annotations

import pytest

from kbtest import write_tree
from kbsync.errors import RootConflict
from kbsync.ingest.discover import parse_root
from kbsync.catalog.identity import ROOT_BINDING
from kbsync.ingest.runner import run_plain
from kbsync.models import SyncMode
from kbsync.store.base import Filter


@pytest.fixture
def share(tmp_path):
    """``my docs`` with 4 files at its top, 3 in ``d1`` and 2 in ``d2``; ``link`` -> it."""
    top = tmp_path / "my docs"
    files = {f"top{i}.md": f"# Top {i}\n\nTop level note {i}." for i in range(4)}
    files.update({f"d1/one{i}.md": f"# One {i}\n\nFirst folder note {i}." for i in range(3)})
    files.update({f"d2/two{i}.md": f"# Two {i}\n\nSecond folder note {i}." for i in range(2)})
    write_tree(top, files)
    (tmp_path / "link").symlink_to(top, target_is_directory=True)
    return top


def _run(runtime, *roots: str, **kwargs) -> dict:
    return run_plain([parse_root(r) for r in roots], runtime=runtime, **kwargs).to_dict()


def _doc_ids(runtime) -> list[str]:
    """Every document's doc_id, once per chunk-0 point (a duplicate shows twice)."""
    return sorted(p.payload["doc_id"] for p in runtime.store.scroll(
        runtime.collection, Filter.where(namespace="default")) if p.payload["chunk_index"] == 0)


def _bindings(runtime) -> dict[str, str]:
    return {b["root"]: b["path"]
            for b in runtime.states.read_meta(ROOT_BINDING, bound_namespace="default")}


def _refused(runtime, *roots: str, names: tuple[str, str], **kwargs) -> str:
    before = (_doc_ids(runtime), runtime.states.load("default"), _bindings(runtime))
    with pytest.raises(RootConflict) as err:
        _run(runtime, *roots, **kwargs)
    message = str(err.value)
    assert "\n" not in message and "--rebind" in message
    assert all(name in message for name in names), message
    assert (_doc_ids(runtime), runtime.states.load("default"), _bindings(runtime)) == before
    return message


@pytest.mark.parametrize("mode", [SyncMode.INCREMENTAL, SyncMode.FULL])
def test_a_subfolder_of_a_bound_root_is_refused_in_a_later_run(adapter_runtime, share, mode):
    runtime = adapter_runtime
    assert _run(runtime, str(share))["added"] == 9
    message = _refused(runtime, str(share / "d1"), names=("d1", "my docs"), mode=mode)
    assert str(share / "d1") in message and str(share) in message
    _refused(runtime, f"sub={share / 'd2'}", names=("sub", "my docs"), mode=mode)
    assert len(_doc_ids(runtime)) == 9


def test_a_parent_of_a_bound_root_is_refused_and_siblings_are_not(adapter_runtime, share):
    runtime = adapter_runtime
    assert _run(runtime, str(share / "d1"))["added"] == 3
    assert _run(runtime, str(share / "d2"))["added"] == 2  # siblings do not overlap
    _refused(runtime, str(share), names=("my docs", "d1"))
    assert _doc_ids(runtime) == sorted([f"d1/one{i}.md" for i in range(3)]
                                       + [f"d2/two{i}.md" for i in range(2)])


def test_a_symlink_and_the_folder_it_names_are_one_root(adapter_runtime, share, tmp_path):
    runtime = adapter_runtime
    link = tmp_path / "link"
    assert _run(runtime, str(link))["added"] == 9  # bound as "my docs", its real path
    _refused(runtime, f"link={share}", names=("link", "my docs"))
    _refused(runtime, f"other={link / 'd1'}", names=("other", "my docs"))
    assert len(_doc_ids(runtime)) == 9 and set(_bindings(runtime)) == {"my docs"}


def test_the_same_root_again_is_not_an_overlap(adapter_runtime, share, tmp_path):
    runtime = adapter_runtime
    _run(runtime, str(share))
    assert _run(runtime, str(tmp_path / "link"))["unchanged"] == 9  # same NAME, same path
    assert _run(runtime, str(share), mode=SyncMode.FULL)["unchanged"] == 9


def test_rebind_makes_the_new_root_replace_the_overlapping_one(adapter_runtime, share):
    runtime = adapter_runtime
    _run(runtime, str(share / "d1"))
    _run(runtime, str(share / "d2"))
    dry = _run(runtime, f"docs={share}", rebind=True, dry_run=True)
    assert sum("replaces the overlapping root" in w for w in dry["warnings"]) == 2
    assert len(_doc_ids(runtime)) == 5 and set(_bindings(runtime)) == {"d1", "d2"}
    summary = _run(runtime, f"docs={share}", rebind=True)
    assert summary["added"] == 9
    assert any("replaces the overlapping root d1" in w for w in summary["warnings"])
    ids = _doc_ids(runtime)
    assert len(ids) == len(set(ids)) == 9 and all(i.startswith("docs/") for i in ids)
    assert _bindings(runtime) == {"docs": str(share)}
    assert set(runtime.states.load("default")) == set(ids)
    assert _run(runtime, f"docs={share}")["unchanged"] == 9


def test_other_namespaces_have_their_own_bindings(adapter_runtime, share):
    runtime = adapter_runtime
    _run(runtime, str(share))
    assert _run(runtime, str(share / "d1"), namespace="other")["added"] == 3


@pytest.mark.parametrize("inside", ["qdrant", "cache", "."])
def test_a_root_inside_kbsync_home_is_refused(adapter_runtime, inside):
    runtime = adapter_runtime
    home = runtime.settings.home
    (home / "qdrant").mkdir(parents=True, exist_ok=True)
    (home / "cache").mkdir(parents=True, exist_ok=True)
    (home / inside / "note.md").write_text("# Note\n\nInside the store's own folder.")
    with pytest.raises(RootConflict, match="KBSYNC_HOME") as err:
        _run(runtime, str(home / inside))
    assert "\n" not in str(err.value)
    assert runtime.store.count(runtime.collection) == 0
