"""The ``rollback`` and ``restore`` flows (deployments rollback/rollback, restore/restore) on
the session's Prefect test server: refused in one line unless ``confirm`` is true; confirmed,
the same locked calls as ``kbsync rebuild --rollback`` / ``--restore`` (#41). The store is
made by hand (a collection and a pointer naming it previous), not by a rebuild: fast."""

from __future__ import annotations

import pytest

from flows.rollback import restore, rollback
from kbsync.errors import UsageError
from kbsync.store import active as pointer


def _rebuilt(settings) -> None:
    """Collection ``kbsync`` (one document), and a pointer as a swap to ``kbsync__r1``
    leaves it: ``kbsync`` previous."""
    from kbsync.runtime import Runtime

    runtime = Runtime.open(settings)
    try:
        runtime.ensure_collection()
    finally:
        runtime.close()
    pointer.write_pointer(settings.home, pointer.ActiveRecord(
        "kbsync", "kbsync__r1", "kbsync", {"chunk_tokens": 64}, {}, "2026-01-01T00:00:00+00:00",
        1))


@pytest.mark.parametrize("which", ["rollback", "restore"])
def test_unconfirmed_is_refused_in_one_line_and_changes_nothing(prefect_api, settings, which):
    _rebuilt(settings)
    before = pointer.read_pointer(settings.home, "kbsync")
    state = (rollback(return_state=True) if which == "rollback"
             else restore(name="kbsync", return_state=True))
    assert state.is_completed() and state.name == "Refused"  # not red: nothing failed
    assert "not confirmed" in state.message and "confirm true" in state.message
    assert "\n" not in state.message
    assert pointer.read_pointer(settings.home, "kbsync") == before


def test_a_confirmed_rollback_serves_the_replaced_collection(prefect_api, settings):
    _rebuilt(settings)
    state = rollback(confirm=True, return_state=True)
    assert state.is_completed(), state.message
    data = state.result()
    assert data["rolled_back"] and data["pointer"]["active"] == "kbsync"
    assert data["pointer"]["previous"] == "kbsync__r1"
    record = pointer.read_pointer(settings.home, "kbsync")
    assert (record.active, record.previous, record.generation) == ("kbsync", "kbsync__r1", 2)
    # Again: kbsync__r1 does not exist, so there is nothing to go back to.
    again = rollback(confirm=True, return_state=True)
    assert again.is_failed()
    with pytest.raises(UsageError, match="kbsync__r1 no longer exists"):
        again.result()


def test_a_confirmed_restore_points_at_the_named_collection(prefect_api, settings):
    _rebuilt(settings)
    state = restore(name="kbsync", confirm=True, return_state=True)
    assert state.is_completed(), state.message
    assert state.result()["pointer"]["active"] == "kbsync"
    bad = restore(name="other", confirm=True, return_state=True)
    assert bad.is_failed()
    with pytest.raises(UsageError, match="not a collection of kbsync"):
        bad.result()
