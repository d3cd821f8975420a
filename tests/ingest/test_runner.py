"""The ingest runner's rules, each tested once through the in-process executor.

The flow (``flows/ingest.py``), the plain loop and ``add_text`` all run through
:mod:`kbsync.ingest.runner`, so a rule proved here holds for all three; the
Prefect executor has its smoke test in ``tests/flows/test_ingest_flow.py``.
"""

from __future__ import annotations


import pytest

from kbtest import recording_executor, write_tree
from kbsync import api
from kbsync.errors import EmbeddingOutage, LockHeld, StoreUnavailable, UsageError
from kbsync.ingest import steps
from kbsync.ingest.discover import parse_root
from kbsync.ingest.executor import CONTEXT, InProcess, bind
from kbsync.catalog.lock import ingest_lock
from kbsync.ingest.summary import counts_of
from kbsync.ingest.runner import IngestRequest, run_ingest, run_plain
from kbsync.models import SyncMode


def _share(tmp_path, files=None):
    share = tmp_path / "share"
    write_tree(share, files or {"a.md": "# A\n\nalpha text", "b.md": "# B\n\nbeta text"})
    return share


def test_two_roots_with_one_name_are_refused_before_anything_runs(runtime, tmp_path):
    one, two = tmp_path / "x" / "docs", tmp_path / "y" / "docs"
    write_tree(one, {"a.md": "a"})
    write_tree(two, {"b.md": "b"})
    executor = recording_executor(runtime)
    with pytest.raises(UsageError, match="share a name"):
        run_ingest(IngestRequest(roots=(parse_root(str(one)), parse_root(str(two)))), executor)
    assert executor.ran == [] and executor.locked == []


def test_steps_run_in_the_order_that_keeps_refusals_write_free(runtime, tmp_path):
    executor = recording_executor(runtime)
    request = IngestRequest(roots=(parse_root(str(_share(tmp_path))),), mode=SyncMode.FULL)
    summary = run_ingest(request, executor)
    assert summary.added == 2 and executor.locked == ["default"]
    # seal_store (#23) runs after the checks and before the plan: what a store holds
    # unsealed is sealed once the run is known to write
    assert executor.ran == ["check_identity", "preflight", "record_identity", "check_collection",
                            "seal_store", "here:plan", "batch", "finish_root"]


def test_a_dry_run_writes_nothing_not_even_the_collection(runtime, tmp_path):
    executor = recording_executor(runtime)
    request = IngestRequest(roots=(parse_root(str(_share(tmp_path))),), dry_run=True)
    summary = run_ingest(request, executor)
    assert summary.added == 2 and summary.dry_run
    assert "record_identity" not in executor.ran and "convert" not in executor.ran
    assert runtime.store.collection_dimension(runtime.collection) is None


def test_an_embedding_outage_raises_with_the_counts_reached(runtime, tmp_path, monkeypatch):
    def all_failed(texts):
        outcome = type(runtime.service).embed_passages(runtime.service, texts)
        outcome.failed = [True] * len(outcome.failed)
        return outcome

    monkeypatch.setattr(runtime.service, "embed_passages", all_failed)
    with pytest.raises(EmbeddingOutage) as raised:
        run_plain([parse_root(str(_share(tmp_path)))], runtime=runtime)
    counts = counts_of(raised.value)
    assert counts["failed"] == 2 and counts["added"] == 0 and counts["files_seen"] == 2


def test_the_plain_loop_takes_the_write_lock(runtime, tmp_path):
    assert runtime.settings.lock_timeout_s == 0  # the default: refuse at once
    with ingest_lock(runtime.settings, "default", purpose="test"):
        with pytest.raises(LockHeld):
            run_plain([parse_root(str(_share(tmp_path)))], runtime=runtime)


def test_add_text_goes_through_the_same_checks_under_the_same_lock(settings, tmp_path):
    with api.KnowledgeBase(settings) as kb:
        assert kb.add_text("# Note\n\nTessera keys rotate.", "notes/k").status == "added"
        assert kb.add_text("# Note\n\nTessera keys rotate.", "notes/k").status == "unchanged"
    with ingest_lock(settings, "default", purpose="test"):
        with api.KnowledgeBase(settings) as kb:
            with pytest.raises(LockHeld):
                kb.add_text("other", "notes/other")


def test_context_placeholder_is_bound_to_the_live_context(runtime):
    assert bind([CONTEXT, 1], runtime) == [runtime, 1]
    assert InProcess(runtime).call(steps.check_collection, CONTEXT, "default", False) is None


class CommitFails:
    """A real store whose first state commit after a document's chunk points were upserted
    fails while ``armed``: the crash point between upsert and commit."""

    def __init__(self, store, state_collection: str) -> None:
        self._store, self._state = store, state_collection
        self.armed, self.chunks_upserted = True, 0

    def __getattr__(self, name):
        return getattr(self._store, name)

    def upsert(self, collection, points):
        if collection != self._state:
            self.chunks_upserted += len(points)
        elif self.armed and self.chunks_upserted:
            raise StoreUnavailable("injected: the store went away before the commit")
        return self._store.upsert(collection, points)


def test_a_failure_between_upsert_and_commit_converges_on_rerun(settings, tmp_path):
    """Invariant: a store failure after a document's points are upserted and before its
    state is committed loses nothing and leaves no stray state; the re-run converges to
    exactly the index (points and state records) of a clean run."""
    from dataclasses import replace

    from kbsync.runtime import Runtime
    from kbsync.catalog.state import StateStore

    share = _share(tmp_path, {"a.md": "# A\n\nalpha", "b.md": "# B\n\nbeta", "c.md": "# C\n\ngamma"})
    clean_settings = settings.model_copy(update={"home": tmp_path / "clean"})
    clean = Runtime.open(clean_settings)
    try:
        run_plain([parse_root(str(share))], runtime=clean)
        expected = _index(clean)
    finally:
        clean.close()
    crashy = Runtime.open(settings)
    try:
        faulty = CommitFails(crashy.store, settings.state_collection)
        broken = replace(crashy, store=faulty, states=StateStore(faulty, settings.state_collection))
        with pytest.raises(StoreUnavailable):
            run_plain([parse_root(str(share))], runtime=broken)
        assert faulty.chunks_upserted > 0  # the failure hit after the points were written
        faulty.armed = False
        assert not crashy.states.load("default"), "no state may be committed by the failed run"
        again = run_plain([parse_root(str(share))], runtime=broken)
        assert again.added == 3 and again.failed == 0
        assert _index(crashy) == expected
    finally:
        crashy.close()


def _index(runtime) -> tuple[dict, dict]:
    points = {p.id: {k: v for k, v in p.payload.items() if k != "updated_at"}
              for p in runtime.store.scroll(runtime.collection)}
    states = {d: (s.content_hash, s.fingerprint, s.chunk_count, s.status)
              for d, s in runtime.states.load("default").items()}
    return points, states
