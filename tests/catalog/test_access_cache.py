"""kbsync.catalog.access.readable_ids: the profiles and each reader's allowed ids are read once
per state collection and read again when a profile is added; a reader whose groups change
gets a fresh answer (issue 39: the condition was rebuilt from every profile record on every
search, ~0.2 s at a few thousand profiles; tests/bench/perms_bench.py)."""

from __future__ import annotations

import pytest

from kbsync.catalog import access
from kbsync.catalog.access import PROFILE, access_condition, readable_ids
from kbsync.catalog.state import StateStore
from kbsync.perms.reader import Reader
from kbsync.perms.rule import Grant, Profile
from kbsync.store.edge.store import EdgeStore

ALICE = Reader(uid=5001, gids=frozenset({6001}), name="alice")


def _profile(owner: int, gid: int, group_ok: bool) -> Profile:
    grant = Grant(owner=owner, owner_ok=True, users=(), groups=((gid, group_ok),), other_ok=False)
    return Profile.of(grant.key(), ())


def _record(states: StateStore, profile: Profile) -> None:
    states.write_meta(PROFILE, (profile.id,), {"access_id": profile.id,
                                                "grants": list(profile.grants)})


@pytest.fixture
def states(tmp_path):
    with EdgeStore(tmp_path / "store") as store:
        yield StateStore(store, "kb_state")


def test_profiles_are_read_once_and_again_when_one_is_added(states, monkeypatch) -> None:
    mine, theirs = _profile(5001, 6002, False), _profile(5002, 6002, True)
    _record(states, mine)
    _record(states, theirs)
    reads = []
    real = access.load_profiles
    monkeypatch.setattr(access, "load_profiles", lambda s: reads.append(1) or real(s))
    assert readable_ids(states, [ALICE]) == (mine.id,)
    assert readable_ids(states, [ALICE]) == (mine.id,)
    assert len(reads) == 1
    _record(states, theirs)  # the same profile again: no new record, nothing read
    assert readable_ids(states, [ALICE]) == (mine.id,) and len(reads) == 1
    ours = _profile(5003, 6001, True)
    _record(states, ours)
    assert set(readable_ids(states, [ALICE])) == {mine.id, ours.id}
    assert len(reads) == 2


def test_a_change_of_groups_is_a_new_reader(states) -> None:
    shared = _profile(5002, 6003, True)
    _record(states, shared)
    assert readable_ids(states, [ALICE]) == ()
    joined = Reader(uid=5001, gids=frozenset({6001, 6003}), name="alice")
    assert readable_ids(states, [joined]) == (shared.id,)
    assert readable_ids(states, [ALICE]) == ()


def test_every_reader_must_pass_and_the_condition_names_the_ids(states, monkeypatch) -> None:
    both = _profile(5001, 6001, True)
    _record(states, both)
    _record(states, _profile(5002, 6002, True))
    bob = Reader(uid=5002, gids=frozenset({6001}), name="bob")
    assert readable_ids(states, [ALICE, bob]) == (both.id,)
    monkeypatch.setattr(Reader, "of_process", classmethod(lambda cls: ALICE))
    assert access_condition(states, "default").any_of == (both.id,)
