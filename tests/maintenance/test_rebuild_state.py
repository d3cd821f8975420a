"""The rebuild's state check (issue 16.2): does the shadow match the shares? Real embedded
engine, hash embeddings, the plain ingest runner (no Prefect)."""

from __future__ import annotations

from kbsync.runtime import Runtime
from kbsync.maintenance import rebuild as rb
from kbsync.ingest.discover import parse_root
from kbsync.ingest.runner import run_plain
from kbsync.models import SyncMode
from kbtest import shadow_runtime, write_tree


def test_state_check_follows_the_shares(runtime, tmp_path):
    share = tmp_path / "docs"
    write_tree(share, {f"d{i}.md": f"# Doc {i}\n\nText of document {i}." for i in range(6)})
    roots = [parse_root(f"docs={share}")]
    assert run_plain(roots, runtime=runtime).added == 6
    shadow = shadow_runtime(runtime)
    plan = rb.RebuildPlan(logical="kbsync", live="kbsync", shadow="kbsync__r1", previous=None,
                          roots={"default": [f"docs={share}"]}, live_build={}, target_build={})
    assert run_plain(roots, runtime=shadow, mode=SyncMode.FULL).added == 6
    assert rb.state_check(plan, shadow, runtime) == {
        "matches": True, "pending": [], "pending_count": 0, "missing": [], "missing_count": 0,
        "mass_delete": [], "roots_changed": False}

    # A change on the share that the shadow has not replayed yet, and a file gone.
    (share / "d1.md").write_text("# Doc 1\n\nRewritten.")
    (share / "d2.md").unlink()
    check = rb.state_check(plan, shadow, runtime)
    assert not check["matches"]
    assert check["pending"] == ["default:docs/d1.md", "default:docs/d2.md"]
    # The replay (a full-mode ingest of the same roots) brings it in line.
    replay = run_plain(roots, runtime=shadow, mode=SyncMode.FULL)
    assert (replay.updated, replay.deleted) == (1, 1)
    assert rb.state_check(plan, shadow, runtime)["matches"]

    # A live document outside every rebuilt root (an api text) would be lost: refused.
    runtime.states.commit([_api_record(runtime)])
    check = rb.state_check(plan, shadow, runtime)
    assert not check["matches"] and check["missing"] == ["default:<api>/note-1"]


def _api_record(runtime: Runtime):
    from kbsync.models import DocState, DocStatus

    return DocState(doc_id="<api>/note-1", namespace="default", root="<api>", path="<api>",
                    content_hash="x", fingerprint=runtime.fingerprint, chunk_count=0,
                    status=DocStatus.OK, updated_at="2026-12-01T00:00:00+00:00", run_id="t",
                    size=1, mtime_ns=0)
