"""Issue 37: ``--mode full --exclude 'd1/*'`` deleted documents whose files still exist.

docs/sync.md says full mode deletes only documents whose files are gone. A filter narrows what
a run looks at; it never deletes: documents the run's ``--include``/``--exclude`` leave out are
kept, counted in ``kept_excluded`` and named in one warning. Real ingests, real store.
"""

from __future__ import annotations

import pytest

from kbtest import write_tree
from kbsync.errors import MassDeleteRefused
from kbsync.ingest.discover import parse_root
from kbsync.ingest.runner import run_plain
from kbsync.models import SyncMode
from kbsync.store.base import Filter


def _doc_ids(runtime) -> set[str]:
    return set(runtime.states.load("default"))


def _points(runtime) -> set[str]:
    return {p.payload["doc_id"] for p in runtime.store.scroll(
        runtime.collection, Filter.where(namespace="default"))}


@pytest.fixture
def share(tmp_path):
    root = tmp_path / "s"
    write_tree(root, {f"d{d}/f{i}.md": f"# D{d} F{i}\n\nFolder {d} file {i}."
                      for d in (1, 2) for i in range(3)})
    return root


def test_full_mode_keeps_what_a_filter_leaves_out(runtime, share):
    spec = [parse_root(str(share))]
    run_plain(spec, runtime=runtime)
    everything = _doc_ids(runtime)
    assert len(everything) == 6
    (share / "d2" / "f0.md").unlink()  # gone, and inside the filters: deleted

    summary = run_plain(spec, runtime=runtime, mode=SyncMode.FULL, exclude=["d1/*"]).to_dict()
    assert summary["deleted"] == 1 and summary["kept_excluded"] == 3, summary
    assert summary["files_seen"] == 2 and summary["unchanged"] == 2
    warning = [w for w in summary["warnings"] if "left out by --include/--exclude" in w]
    assert len(warning) == 1 and "s/d1/f0.md" in warning[0]
    assert _doc_ids(runtime) == _points(runtime) == everything - {"s/d2/f0.md"}

    # --include leaves out what it does not name, the same way
    summary = run_plain(spec, runtime=runtime, mode=SyncMode.FULL, include=["d2/*"]).to_dict()
    assert summary["deleted"] == 0 and summary["kept_excluded"] == 3, summary
    # an unfiltered full run looks at everything again: nothing is left out
    summary = run_plain(spec, runtime=runtime, mode=SyncMode.FULL).to_dict()
    assert summary["deleted"] == 0 and summary["kept_excluded"] == 0
    assert len(_doc_ids(runtime)) == 5


def test_a_filter_leaving_out_most_of_a_root_is_no_mass_delete(runtime, share):
    spec = [parse_root(str(share))]
    run_plain(spec, runtime=runtime)
    # 5 of 6 documents left out: before, the guard refused (83% > 50%) or, with
    # --allow-mass-delete, the five documents went although their files are there.
    summary = run_plain(spec, runtime=runtime, mode=SyncMode.FULL,
                        include=["f0.md"], exclude=["d1/*"]).to_dict()
    assert summary["deleted"] == 0 and summary["kept_excluded"] == 5
    assert len(_doc_ids(runtime)) == 6
    # a dry run plans the same
    dry = run_plain(spec, runtime=runtime, mode=SyncMode.FULL, exclude=["d1/*", "d2/*"],
                    dry_run=True).to_dict()
    assert dry["deleted"] == 0 and dry["kept_excluded"] == 6


def test_gone_files_inside_the_filters_still_meet_the_guard(runtime, share):
    spec = [parse_root(str(share))]
    run_plain(spec, runtime=runtime)
    for rel in ("d2/f0.md", "d2/f1.md", "d1/f0.md", "d1/f1.md"):
        (share / rel).unlink()
    with pytest.raises(MassDeleteRefused):  # 4 of 6 gone
        run_plain(spec, runtime=runtime, mode=SyncMode.FULL)
    summary = run_plain(spec, runtime=runtime, mode=SyncMode.FULL, exclude=["d1/*"]).to_dict()
    # d1's gone files are out of the run's sight: kept until a run that sees them
    assert summary["deleted"] == 2 and summary["kept_excluded"] == 3
    assert _doc_ids(runtime) == {"s/d1/f0.md", "s/d1/f1.md", "s/d1/f2.md", "s/d2/f2.md"}
    assert run_plain(spec, runtime=runtime, mode=SyncMode.FULL).to_dict()["deleted"] == 2
