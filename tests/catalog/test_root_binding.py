"""Root identity (issue 10.2): a root NAME is bound to the path it was first synced from.

Two shares with one folder name (``x/docs`` and ``y/docs``) used to overwrite each
other's documents, and a full run of the second deleted the rest of the first. Runs go
through ``run_plain`` on both adapters; the flow and the CLI are covered by
``tests/flows/test_identity_cli.py``.
"""

from __future__ import annotations

import shutil

import pytest

from kbtest import write_tree
from kbsync.ingest.discover import parse_root
from kbsync.errors import RootConflict, UsageError
from kbsync.catalog.identity import ROOT_BINDING
from kbsync.ingest.runner import run_plain
from kbsync.models import SyncMode
from kbsync.catalog.state import META_KEY
from kbsync.query.stats import collect_stats
from kbsync.store.base import Filter



def _files(names, tag: str) -> dict[str, str]:
    return {f"{n}.md": f"# {n} from {tag}\n\nBody of {n} written in share {tag}." for n in names}


@pytest.fixture
def shares(tmp_path):
    """``x/docs`` with 10 files, ``y/docs`` with 8, 6 of them with the same names."""
    x, y = tmp_path / "x" / "docs", tmp_path / "y" / "docs"
    write_tree(x, _files([f"f{i}" for i in range(10)], "x"))
    write_tree(y, _files([f"f{i}" for i in range(6)] + ["y6", "y7"], "y"))
    return x, y


def _run(runtime, *roots: str, **kwargs) -> dict:
    return run_plain([parse_root(r) for r in roots], runtime=runtime, **kwargs).to_dict()


def _index(runtime, namespace: str = "default") -> dict[str, str]:
    """doc_id -> text of chunk 0, for every document of the namespace."""
    return {p.payload["doc_id"]: p.payload["text"] for p in runtime.store.scroll(
        runtime.collection, Filter.where(namespace=namespace)) if p.payload["chunk_index"] == 0}


def test_same_name_from_another_path_is_refused_and_x_keeps_its_documents(adapter_runtime,
                                                                          shares):
    runtime = adapter_runtime
    x, y = shares
    assert _run(runtime, str(x))["added"] == 10
    before = _index(runtime)
    states_before = runtime.states.load("default")
    for mode in (SyncMode.INCREMENTAL, SyncMode.FULL):
        with pytest.raises(RootConflict) as err:
            _run(runtime, str(y), mode=mode)
        message = str(err.value)
        assert "\n" not in message and str(x) in message and str(y) in message
        assert f"docs2={y}" in message and "--rebind" in message
        assert _index(runtime) == before  # nothing overwritten, nothing deleted
        assert runtime.states.load("default") == states_before
    # The way out: another NAME. Both shares are then indexed side by side.
    assert _run(runtime, f"ydocs={y}")["added"] == 8
    index = _index(runtime)
    assert len(index) == 18 and "from x" in index["docs/f0.md"] and "from y" in index["ydocs/f0.md"]
    # The binding records are not documents: loading, counting and stats ignore them.
    assert len(runtime.states.load("default")) == 18
    assert len(runtime.states.load("default", "docs")) == 10
    assert runtime.states.namespaces() == {"default": {"documents": 18, "partial": 0}}
    stats = collect_stats(runtime.store, runtime.settings)
    assert stats["namespaces"]["default"]["documents"] == 18
    bound = runtime.states.read_meta(ROOT_BINDING, bound_namespace="default")
    assert {b["root"]: b["path"] for b in bound} == {"docs": str(x), "ydocs": str(y)}
    # Other namespaces have their own bindings.
    assert _run(runtime, str(y), namespace="other")["added"] == 8


def test_rebind_keeps_documents_and_the_next_run_compares_by_content(adapter_runtime, shares,
                                                                     tmp_path):
    runtime = adapter_runtime
    x, _ = shares
    _run(runtime, str(x))
    ids_before = set(runtime.states.load("default"))
    moved = tmp_path / "new" / "docs"
    moved.parent.mkdir()
    shutil.copytree(x, moved)  # a copy: new mtimes, so every file is hashed
    shutil.rmtree(x)
    (moved / "f3.md").write_text("# f3 edited\n\nChanged after the move.", encoding="utf-8")
    with pytest.raises(RootConflict):
        _run(runtime, str(moved))
    summary = _run(runtime, str(moved), rebind=True, mode=SyncMode.FULL)
    assert (summary["added"], summary["updated"], summary["unchanged"], summary["deleted"]) \
        == (0, 1, 9, 0)
    assert any("rebound" in w and str(moved) in w for w in summary["warnings"])
    assert set(runtime.states.load("default")) == ids_before
    again = _run(runtime, str(moved))
    assert again["unchanged"] == 10 and again["files_hashed"] == 0
    # The old path is now the stranger.
    write_tree(x, _files(["f0"], "x"))
    with pytest.raises(RootConflict):
        _run(runtime, str(x))


def test_dry_run_checks_but_records_nothing(adapter_runtime, shares):
    runtime = adapter_runtime
    x, y = shares
    assert _run(runtime, str(y), dry_run=True)["added"] == 8
    assert runtime.states.read_meta(ROOT_BINDING, bound_namespace="default") == []
    _run(runtime, str(x))  # the dry run bound nothing: x may take the name
    with pytest.raises(RootConflict):
        _run(runtime, str(y), dry_run=True)


def test_store_without_bindings_infers_them_from_document_records(adapter_runtime, shares):
    runtime = adapter_runtime
    x, y = shares
    _run(runtime, str(x))
    # A store written before bindings existed: drop the binding records.
    runtime.store.delete(runtime.settings.state_collection,
                         Filter.where(**{META_KEY: ROOT_BINDING}))
    assert runtime.states.read_meta(ROOT_BINDING, bound_namespace="default") == []
    with pytest.raises(RootConflict, match="holds documents synced from"):
        _run(runtime, str(y))
    assert _run(runtime, str(x))["unchanged"] == 10
    assert len(runtime.states.read_meta(ROOT_BINDING, bound_namespace="default")) == 1


def test_overlapping_roots_and_a_root_holding_the_store_are_refused(adapter_runtime, tmp_path):
    runtime = adapter_runtime
    write_tree(tmp_path / "a", {"one.md": "# One\n\nFirst.", "b/two.md": "# Two\n\nSecond."})
    with pytest.raises(RootConflict, match="overlap"):
        _run(runtime, str(tmp_path / "a"), str(tmp_path / "a" / "b"))
    with pytest.raises(RootConflict, match="overlap"):
        _run(runtime, f"p={tmp_path / 'a'}", f"q={tmp_path / 'a'}")
    home = runtime.settings.home  # tmp_path / "home": inside tmp_path
    assert home.resolve().parent == tmp_path.resolve()
    with pytest.raises(RootConflict, match="KBSYNC_HOME"):
        _run(runtime, str(tmp_path))
    assert runtime.store.count(runtime.collection) == 0


def test_empty_path_after_the_name_is_a_usage_error():
    with pytest.raises(UsageError, match="empty path"):
        parse_root("docs=")
    with pytest.raises(UsageError, match="empty path"):
        parse_root("docs=  ")
