"""The search path's cache (issue 42, :mod:`kbsync.store.memo`): each answer a search keeps
(the embedder check, the roots not captured, the number of profiles, the old-chunk count,
"the filter matches every point") is read again after any write to the store, a write in
flight keeps nothing, and a store without a revision (a Qdrant server, a relay reader:
written by other processes) keeps nothing at all."""

from __future__ import annotations

import uuid

import pytest

from kbsync.catalog import access, identity
from kbsync.catalog.access import CAPTURED, access_condition, mark_captured
from kbsync.catalog.identity import EMBEDDER, ROOT_BINDING, EmbedderIdentity
from kbsync.catalog.schema import PAYLOAD_VERSION
from kbsync.catalog.state import StateStore
from kbsync.errors import EmbedderMismatch
from kbsync.perms.reader import Reader
from kbsync.query.search import search
from kbsync.store import Point
from kbsync.store.memo import Revision, remember, revision_of, still
from kbsync.text.sparse import encode_document

COLL = "kb"
STATE = "kb_state"
ALICE = Reader(uid=5001, gids=frozenset({6001}), name="alice")


def _point(service, i: int, namespace: str, text: str, **extra) -> Point:
    return Point(str(uuid.UUID(int=i + 1)),
                 {"namespace": namespace, "doc_id": f"{namespace}/d{i}", "text": text,
                  "embedding_failed": False, "payload_version": PAYLOAD_VERSION, **extra},
                 service.embed_query(text), encode_document(text))


@pytest.fixture
def kb(edge, service):
    edge.ensure_collection(COLL, dimension=service.dimension,
                           keyword_indexes=("namespace", "access"), sparse=True,
                           integer_indexes=("payload_version",))
    edge.upsert(COLL, [_point(service, i, "ns", f"key rotation note {i}") for i in range(6)])
    StateStore(edge, STATE).write_meta(EMBEDDER, (COLL,), EmbedderIdentity(
        service.provider, service.model, service.dimension).to_payload())
    return edge


class NoRevision:
    """A store seen as a Qdrant server or a relay reader is: the same calls, no revision."""

    def __init__(self, store) -> None:
        self._store = store

    def __getattr__(self, name):
        if name == "revision":
            raise AttributeError(name)
        return getattr(self._store, name)


def test_every_write_changes_the_revision_and_a_write_in_flight_has_none(kb, service) -> None:
    before = kb.revision()
    kb.upsert(COLL, [_point(service, 50, "ns", "one more")])
    after_upsert = kb.revision()
    kb.set_payload(COLL, _filter("ns/d50"), {"x": 1})
    after_set = kb.revision()
    kb.delete_ids(COLL, [str(uuid.UUID(int=51))])
    after_delete = kb.revision()
    assert before < after_upsert < after_set < after_delete
    kb._revision.begin()
    assert kb.revision() is None and not still(kb, after_delete)
    kb._revision.end()
    assert kb.revision() == after_delete + 1


def _filter(doc_id: str):
    from kbsync.store.base import Filter

    return Filter.where(doc_id=doc_id)


def test_remember_keeps_an_answer_until_a_write() -> None:
    class Store:
        def __init__(self) -> None:
            self._revision = Revision()

        def revision(self):
            return self._revision.value()

    store, calls = Store(), []
    compute = lambda: calls.append(1) or len(calls)  # noqa: E731
    assert remember(store, "k", compute) == 1 and remember(store, "k", compute) == 1
    store._revision.begin()
    assert remember(store, "k", compute) == 2  # in flight: computed, not kept
    store._revision.end()
    assert remember(store, "k", compute) == 3 and remember(store, "k", compute) == 3
    with pytest.raises(ZeroDivisionError):
        remember(store, "boom", lambda: 1 / 0)
    assert remember(store, "boom", lambda: "fine") == "fine"  # a failure is not kept


def test_the_embedder_record_is_read_once_then_again_after_a_write(kb, service,
                                                                   monkeypatch) -> None:
    reads = []
    real = identity.check_embedder
    monkeypatch.setattr(identity, "check_embedder",
                        lambda *a, **k: reads.append(1) or real(*a, **k))
    for _ in range(3):
        assert search("key rotation", store=kb, service=service, collection=COLL,
                      namespace="ns").results
    assert len(reads) == 1
    # Another embedder's record (a rebuild in place, a restore): the next search refuses.
    StateStore(kb, STATE).write_meta(EMBEDDER, (COLL,), EmbedderIdentity(
        "local", "other-model", service.dimension).to_payload())
    with pytest.raises(EmbedderMismatch):
        search("key rotation", store=kb, service=service, collection=COLL, namespace="ns")
    with pytest.raises(EmbedderMismatch):  # a refusal is not kept
        search("key rotation", store=kb, service=service, collection=COLL, namespace="ns")


def test_a_store_without_a_revision_checks_every_search(kb, service, monkeypatch) -> None:
    reads = []
    real = identity.check_embedder
    monkeypatch.setattr(identity, "check_embedder",
                        lambda *a, **k: reads.append(1) or real(*a, **k))
    seen = []
    real_search = kb.search
    monkeypatch.setattr(kb, "search", lambda *a, **k: seen.append(k.get("flt")) or
                        real_search(*a, **k))
    plain = NoRevision(kb)
    assert revision_of(plain) is None
    for _ in range(3):
        search("key rotation", store=plain, service=service, collection=COLL, namespace="ns")
    assert len(reads) == 3
    assert all(flt is not None for flt in seen)  # and the filter is never left out


def test_relay_readers_and_servers_have_no_revision() -> None:
    from kbsync.store.edge.relay_client import RelayStore
    from kbsync.store.server.store import ServerStore

    assert not hasattr(RelayStore, "revision") and not hasattr(ServerStore, "revision")


def test_the_filter_is_left_out_only_while_it_matches_every_point(kb, service,
                                                                   monkeypatch) -> None:
    seen = []
    real_search = kb.search
    monkeypatch.setattr(kb, "search", lambda *a, **k: seen.append(k.get("flt")) or
                        real_search(*a, **k))
    search("key rotation", store=kb, service=service, collection=COLL, namespace="ns",
           mode="dense")
    assert seen == [None]  # one namespace, nothing flagged: the engine scans unfiltered
    kb.upsert(COLL, [_point(service, 20, "other", "key rotation note elsewhere")])
    seen.clear()
    result = search("key rotation note elsewhere", store=kb, service=service, collection=COLL,
                    namespace="ns", k=10, mode="dense")
    assert len(seen) == 1 and seen[0] is not None
    assert {h.doc_id for h in result.results} == {f"ns/d{i}" for i in range(6)}


def test_a_write_during_an_unfiltered_search_searches_again_with_the_filter(
        kb, service, monkeypatch) -> None:
    seen = []
    real_search = kb.search

    def racing(*args, **kwargs):
        seen.append(kwargs.get("flt"))
        hits = real_search(*args, **kwargs)
        if len(seen) == 1:  # another thread's write lands while this search runs
            kb.upsert(COLL, [_point(service, 30, "other", "key rotation note racing")])
            hits = real_search(*args, **kwargs)
        return hits

    monkeypatch.setattr(kb, "search", racing)
    result = search("key rotation note racing", store=kb, service=service, collection=COLL,
                    namespace="ns", k=10, mode="dense")
    assert seen[0] is None and seen[1] is not None and len(seen) == 2
    assert all(h.doc_id.startswith("ns/") for h in result.results)


def test_roots_not_captured_and_profiles_are_read_again_after_a_write(kb, monkeypatch) -> None:
    monkeypatch.setattr(Reader, "of_process", classmethod(lambda cls: ALICE))
    states = StateStore(kb, STATE)
    states.write_meta(ROOT_BINDING, ("ns", "share"),
                      {"bound_namespace": "ns", "root": "share", "path": "/srv/share"})
    reads = []
    real = access.uncaptured_roots
    monkeypatch.setattr(access, "uncaptured_roots", lambda *a: reads.append(1) or real(*a))
    assert access_condition(states, "ns") is None  # not captured: the owner's old view
    assert access_condition(states, "ns") is None and len(reads) == 1
    mark_captured(states, "ns", "share")
    assert states.read_meta(CAPTURED, captured_namespace="ns")
    condition = access_condition(states, "ns")
    assert condition is not None and condition.any_of == (access.NOTHING,)
    assert len(reads) == 2
    counts = []
    real_count = states.count_meta
    monkeypatch.setattr(states, "count_meta", lambda kind: counts.append(kind) or
                        real_count(kind))
    access_condition(states, "ns")
    assert counts == []  # the number of profiles is kept too
    states.write_meta(access.PROFILE, ("p1",), {"access_id": "p1", "grants": []})
    access_condition(states, "ns")
    assert counts == [access.PROFILE]


def test_the_old_chunk_count_is_kept_until_a_write(kb, service, monkeypatch) -> None:
    counts = []
    from kbsync.query import filters

    real_count = filters.count_old
    monkeypatch.setattr(filters, "count_old", lambda *a: counts.append(1) or real_count(*a))
    for _ in range(2):
        result = search("key rotation", store=kb, service=service, collection=COLL,
                        namespace="ns", path_prefix="docs")
        assert not result.notes
    assert len(counts) == 1
    old = _point(service, 40, "ns", "an old chunk")
    old.payload.pop("payload_version")
    kb.upsert(COLL, [old])
    result = search("key rotation", store=kb, service=service, collection=COLL,
                    namespace="ns", path_prefix="docs")
    assert len(counts) == 2 and result.notes and "1 chunks" in result.notes[0]
