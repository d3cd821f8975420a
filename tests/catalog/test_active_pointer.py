"""The active-collection pointer (issue 16.2): the embedded engine's pointer file and the
aliases of qdrant-client's local mode, resolution of the settings, the gate's decision.
No Prefect server."""

from __future__ import annotations

import json

import pytest

from kbsync.errors import StoreError, StoreUnavailable, UsageError
from kbsync.maintenance import rebuild as rb
from kbsync.catalog import active
from kbsync.store import active as pointer


def test_pointer_file_round_trip_is_atomic(tmp_path):
    home = tmp_path / "home"
    assert pointer.read_pointer(home, "kbsync") is None
    first = pointer.ActiveRecord("kbsync", "kbsync__r1", "kbsync", {"embed_model": "m1"})
    path = pointer.write_pointer(home, first)
    assert pointer.read_pointer(home, "kbsync") == first
    # A crash mid-write leaves a temporary file beside the pointer, never a torn pointer.
    (path.parent / ".kbsync.crashed.tmp").write_text('{"logical": "kbs')
    assert pointer.read_pointer(home, "kbsync") == first
    second = first.rolled_back("now")
    pointer.write_pointer(home, second)
    assert pointer.read_pointer(home, "kbsync") == second
    assert (second.active, second.previous, second.build) == ("kbsync", "kbsync__r1", {})
    assert sorted(p.name for p in path.parent.iterdir()) == [".kbsync.crashed.tmp",
                                                             "kbsync.json"]


def test_a_damaged_pointer_is_one_clear_error(tmp_path):
    path = pointer.pointer_path(tmp_path, "kbsync")
    path.parent.mkdir(parents=True)
    path.write_text("not json")
    with pytest.raises(StoreError, match=r"pointer .*kbsync\.json: not a pointer record"):
        pointer.read_pointer(tmp_path, "kbsync")


def test_generation_names():
    names = ["kbsync", "kbsync_state", "kbsync__r1", "kbsync__r1_state", "kbsync__r3",
             "other__r9", "kbsync__rx"]
    assert pointer.shadow_name("kbsync", names) == "kbsync__r4"
    assert pointer.shadow_name("kbsync", ["kbsync"]) == "kbsync__r1"
    record = pointer.ActiveRecord("kbsync", "kbsync__r3", "kbsync__r1")
    assert rb.choose_shadow("kbsync", names, record) == "kbsync__r4"
    # A leftover generation (a crashed rebuild) is resumed or discarded, not skipped.
    assert rb.choose_shadow("kbsync", names + ["kbsync__r5"], record) == "kbsync__r5"


def test_resolve_the_embedded_pointer(settings):
    assert active.resolve(settings) is settings  # never rebuilt: unchanged
    before = active.pointer_mark(settings)
    build = {"embed_provider": "hash", "embed_model": "hash-64", "embed_dimensions": 64,
             "chunk_tokens": 100, "chunk_overlap": 10, "contextual_text": False}
    pointer.write_pointer(settings.home, pointer.ActiveRecord("kbsync", "kbsync__r2",
                                                              "kbsync", build))
    resolved = active.resolve(settings)
    swapped = active.pointer_mark(settings)
    assert swapped != before and active.pointer_mark(resolved) == swapped  # the logical name's
    assert (resolved.collection, resolved.active_of, resolved.state_collection) == (
        "kbsync__r2", "kbsync", "kbsync__r2_state")
    assert (resolved.embed_dimensions, resolved.chunk_tokens, resolved.contextual_text) == (
        64, 100, False)
    assert active.resolve(resolved) is resolved  # idempotent
    active.check_still_active(resolved)
    pointer.write_pointer(settings.home, pointer.ActiveRecord("kbsync", "kbsync__r3"))
    assert active.pointer_mark(settings) not in (before, swapped)
    with pytest.raises(StoreUnavailable, match="now serves from kbsync__r3, not kbsync__r2"):
        active.check_still_active(resolved)


def test_aliases_on_qdrant_client_local_mode(settings, tmp_path):
    from kbsync.store.server.store import ServerStore

    store = ServerStore.local(tmp_path / "local")
    try:
        for name in ("kbsync", "kbsync__r1"):
            store.ensure_collection(name, dimension=4)
        active.write_build(store, "kbsync__r1", {"embed_model": "hash-4",
                                                 "embed_dimensions": 4}, run_id="t")
        assert active.read_record(settings, store) is None
        plan = rb.RebuildPlan(logical="kbsync", live="kbsync", shadow="kbsync__r1",
                              previous=None, roots={}, live_build={},
                              target_build={"embed_model": "hash-4", "embed_dimensions": 4})
        before = active.pointer_mark(settings, store)
        rb.swap(plan, settings, store)
        assert active.pointer_mark(settings, store) == ("kbsync__r1", "kbsync") != before
        aliases = {a.alias_name: a.collection_name for a in store.client.get_aliases().aliases}
        assert aliases == {"kbsync__active": "kbsync__r1", "kbsync__previous": "kbsync"}
        resolved = active.resolve(settings, store)
        assert (resolved.collection, resolved.embed_dimensions) == ("kbsync__r1", 4)
        assert store.count("kbsync__active") == store.count("kbsync__r1")  # a real alias
        back = rb.rollback(settings, store)
        assert (back["active"], back["previous"]) == ("kbsync", "kbsync__r1")
        assert active.resolve(settings, store).collection == "kbsync"
        with pytest.raises(StoreUnavailable):
            active.check_still_active(resolved, store)
    finally:
        store.close()


def test_rollback_without_a_rebuild_is_a_usage_error(settings):
    with pytest.raises(UsageError, match="nothing to roll back to"):
        rb.rollback(settings)


def _eval(**ndcg):
    return {"modes": {mode: {"ndcg@10": value} for mode, value in ndcg.items()}}


@pytest.mark.parametrize(("shadow", "swap"), [(0.80, True), (0.79, True), (0.7799, False)])
def test_decide_on_the_drop(shadow, swap):
    state = {"matches": True, "pending_count": 0, "missing_count": 0}
    decision = rb.decide(_eval(dense=0.80, hybrid=0.9), _eval(dense=shadow, hybrid=0.95),
                         max_drop=0.02, state=state)
    assert decision["swap"] is swap
    assert decision["modes"]["hybrid"]["ok"] and decision["modes"]["hybrid"]["delta"] == 0.05
    assert bool(decision["reasons"]) is not swap


def test_decide_refuses_a_shadow_whose_state_does_not_match():
    state = {"matches": False, "pending_count": 2, "missing_count": 1}
    decision = rb.decide(_eval(dense=0.5), _eval(dense=0.9), max_drop=0.02, state=state)
    assert not decision["swap"]
    assert decision["reasons"] == ["the shadow's state does not match the shares (2 documents "
                                   "pending, 1 live documents missing)"]


def test_pointer_file_is_json_with_sorted_keys(tmp_path):
    path = pointer.write_pointer(tmp_path, pointer.ActiveRecord("kb", "kb__r1"))
    data = json.loads(path.read_text())
    assert list(data) == sorted(data) and data["active"] == "kb__r1"
