"""One conformance suite for every VectorStore adapter (see ``conftest.BACKENDS``).

The invariants under test are those of ``kbsync/store/base.py``: cosine on a
named dense vector, caller-chosen UUID ids, upsert replaces, best-first
search, typed errors, and validation of every vector before any write (a bad
point in a batch leaves nothing written).
"""

from __future__ import annotations

import math
import random
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest

from kbsync.errors import (
    DimensionMismatch,
    InvalidVector,
    StoreError,
    StoreUnavailable,
    TransientError,
    UsageError,
)
from kbsync.settings import Settings
from kbsync.store import Filter, Match, Point, Range, VectorStore, open_store
from kbsync.store.edge.store import EdgeStore
from kbsync.store.server.store import ServerStore

DIM = 8
INDEXES = ("namespace", "doc_id")


def pid(n: int) -> str:
    """A deterministic canonical UUID for test point ``n``."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"kbsync-test/{n}"))


def unit(seed: int, dim: int = DIM) -> list[float]:
    """A reproducible random unit vector."""
    rnd = random.Random(seed)
    vec = [rnd.gauss(0.0, 1.0) for _ in range(dim)]
    norm = math.sqrt(sum(v * v for v in vec))
    return [v / norm for v in vec]


def chunk(n: int, namespace: str = "ns-a", doc: str | None = None, **extra: object) -> Point:
    payload = {"namespace": namespace, "doc_id": doc or f"doc-{n // 3}", "n": n, **extra}
    return Point(pid(n), payload, unit(n))


@pytest.fixture
def coll(store: VectorStore, backend) -> str:
    name = backend.name()
    store.ensure_collection(name, dimension=DIM, keyword_indexes=INDEXES)
    return name


def ids_of(store: VectorStore, name: str, flt: Filter | None = None) -> set[str]:
    return {p.id for p in store.scroll(name, flt)}


# --- collections --------------------------------------------------------------
def test_store_satisfies_protocol(store: VectorStore) -> None:
    assert isinstance(store, VectorStore)


def test_ensure_creates_then_reopen_with_same_dimension(store, backend, reopen) -> None:
    name = backend.name()
    assert store.collection_dimension(name) is None
    store.ensure_collection(name, dimension=DIM, keyword_indexes=INDEXES)
    store.ensure_collection(name, dimension=DIM, keyword_indexes=INDEXES)  # idempotent
    assert store.collection_dimension(name) == DIM
    store.upsert(name, [chunk(1)])
    store = reopen(store)
    assert store.collection_dimension(name) == DIM
    store.ensure_collection(name, dimension=DIM, keyword_indexes=INDEXES)
    assert store.count(name) == 1


def test_dimension_mismatch_on_reopen_names_both(store, backend, reopen) -> None:
    name = backend.name()
    store.ensure_collection(name, dimension=DIM)
    with pytest.raises(DimensionMismatch, match=rf"{DIM}.*16"):
        store.ensure_collection(name, dimension=16)
    store = reopen(store)
    with pytest.raises(DimensionMismatch, match=rf"{DIM}.*16"):
        store.ensure_collection(name, dimension=16)
    assert store.collection_dimension(name) == DIM


def test_bad_collection_name_refused(store) -> None:
    with pytest.raises(UsageError):
        store.ensure_collection("../escape", dimension=DIM)


def test_missing_collection_reads_empty_and_write_raises(store, backend) -> None:
    name = backend.name("absent")
    assert store.count(name) == 0
    assert list(store.scroll(name)) == []
    assert store.search(name, unit(0), limit=3) == []
    store.delete_ids(name, [pid(1)])
    store.delete(name, Filter.where(namespace="x"))
    with pytest.raises(StoreError, match="does not exist"):
        store.upsert(name, [chunk(1)])


# --- writes -------------------------------------------------------------------
def test_upsert_replaces_vector_and_payload(store, coll) -> None:
    store.upsert(coll, [chunk(1), chunk(2)])
    store.upsert(coll, [chunk(1), chunk(2)])  # run twice: nothing new
    assert store.count(coll) == 2
    new = Point(pid(1), {"namespace": "ns-b", "doc_id": "moved"}, unit(99))
    store.upsert(coll, [new])
    assert store.count(coll) == 2
    got = {p.id: p for p in store.scroll(coll, with_vectors=True)}
    assert got[pid(1)].payload == {"namespace": "ns-b", "doc_id": "moved"}
    assert got[pid(1)].vector == pytest.approx(unit(99), abs=1e-5)  # stored normalised
    assert len(got[pid(2)].vector) == DIM


def test_payload_round_trips(store, coll) -> None:
    payload = {"namespace": "ns-a", "doc_id": "d", "title": "Résumé — 日本", "page": 3,
               "score": 0.25, "tags": ["a", "b"], "meta": {"k": [1, None, True]}, "none": None}
    store.upsert(coll, [Point(pid(1), payload, unit(1))])
    (got,) = list(store.scroll(coll))
    assert got.payload == payload
    assert got.vector is None


def test_wrong_dimension_writes_nothing(store, coll) -> None:
    bad = Point(pid(2), {"namespace": "ns-a"}, [1.0] * (DIM + 1))
    with pytest.raises(DimensionMismatch, match=rf"{DIM + 1}.*{DIM}"):
        store.upsert(coll, [chunk(1), bad])
    assert store.count(coll) == 0


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), 1e39])
def test_non_finite_vector_refused(store, coll, value: float) -> None:
    vec = unit(1)
    vec[3] = value
    with pytest.raises(InvalidVector):
        store.upsert(coll, [chunk(2), Point(pid(1), {"namespace": "ns-a"}, vec)])
    assert store.count(coll) == 0


def test_zero_vector_only_when_flagged(store, coll) -> None:
    zero = [0.0] * DIM
    for payload in ({"namespace": "ns-a"}, {"embedding_failed": "true"}, {"embedding_failed": 1}):
        with pytest.raises(InvalidVector, match="zeros"):
            store.upsert(coll, [Point(pid(1), payload, zero)])
    with pytest.raises(InvalidVector):
        store.upsert(coll, [Point(pid(1), {"namespace": "ns-a"}, None)])  # type: ignore[arg-type]
    store.upsert(coll, [Point(pid(1), {"namespace": "ns-a", "embedding_failed": True}, zero)])
    store.upsert(coll, [chunk(2)])
    assert store.count(coll, Filter.where(embedding_failed=True)) == 1
    hits = store.search(coll, unit(2), limit=5)
    assert hits[0].id == pid(2)
    assert all(math.isfinite(h.score) for h in hits)


# An upper-case uuid4, spelled out: parallel workers must collect the same test ids.
UPPER_UUID = "9358746E-9F8E-4BB3-ABC3-50AF457B9078"


@pytest.mark.parametrize("bad_id", ["not-a-uuid", UPPER_UUID, 7])
def test_point_ids_must_be_canonical_uuids(store, coll, bad_id) -> None:
    with pytest.raises(UsageError):
        store.upsert(coll, [Point(bad_id, {}, unit(1))])
    with pytest.raises(UsageError):
        store.delete_ids(coll, [bad_id])


def test_duplicate_id_in_batch_refused(store, coll) -> None:
    with pytest.raises(UsageError, match="twice"):
        store.upsert(coll, [chunk(1), chunk(1)])


# --- deletes ------------------------------------------------------------------
def test_delete_ids_ignores_unknown(store, coll) -> None:
    store.upsert(coll, [chunk(n) for n in range(5)])
    store.delete_ids(coll, [pid(1), pid(3), pid(1000)])
    store.delete_ids(coll, [])
    assert ids_of(store, coll) == {pid(0), pid(2), pid(4)}


def test_delete_by_filter(store, coll) -> None:
    store.upsert(coll, [chunk(n, "ns-a", f"d{n % 2}") for n in range(6)]
                 + [chunk(n, "ns-b", "d0") for n in range(6, 9)])
    store.delete(coll, Filter.where(namespace="ns-a", doc_id="d0"))
    assert store.count(coll) == 6
    assert store.count(coll, Filter.where(doc_id="d0")) == 3  # ns-b's d0 untouched
    # stale-chunk cleanup shape: this doc's points except the ones just written
    store.delete(coll, Filter.where(namespace="ns-a", doc_id="d1").and_not("n", 5))
    assert ids_of(store, coll, Filter.where(namespace="ns-a")) == {pid(5)}


@pytest.mark.parametrize("flt", [Filter(), None])
def test_empty_filter_delete_refused(store, coll, flt) -> None:
    store.upsert(coll, [chunk(1)])
    with pytest.raises(UsageError, match="empty filter"):
        store.delete(coll, flt)  # type: ignore[arg-type]
    assert store.count(coll) == 1


# --- reads --------------------------------------------------------------------
def test_scroll_pages_through_everything_in_id_order(store, coll) -> None:
    total = 2500  # two full pages and a partial one
    store.upsert(coll, [chunk(n, namespace=f"ns-{n % 2}") for n in range(total)])
    seen = [p.id for p in store.scroll(coll, page_size=1000)]
    assert len(seen) == total
    assert set(seen) == {pid(n) for n in range(total)}
    assert seen == sorted(seen)  # UUID byte order == canonical string order
    evens = list(store.scroll(coll, Filter.where(namespace="ns-0"), page_size=1000,
                              with_payload=False, with_vectors=True))
    assert len(evens) == total // 2
    assert all(p.payload == {} and len(p.vector or ()) == DIM for p in evens)
    assert store.count(coll) == total


def test_count_with_filters(store, coll) -> None:
    store.upsert(coll, [chunk(n, f"ns-{n % 3}", flag=(n % 2 == 0)) for n in range(12)])
    assert store.count(coll) == 12
    assert store.count(coll, Filter()) == 12
    assert store.count(coll, Filter.where(namespace="ns-0")) == 4
    assert store.count(coll, Filter.where(namespace="ns-0", flag=True)) == 2
    assert store.count(coll, Filter.where(flag=False)) == 6
    assert store.count(coll, Filter.where(n=3)) == 1
    assert store.count(coll, Filter.where(namespace="nope")) == 0


def test_must_not_and_any_of(store, coll) -> None:
    store.upsert(coll, [chunk(n, f"ns-{n % 3}", flag=(n % 2 == 0)) for n in range(12)])
    any_ns = Match("namespace", any_of=("ns-0", "ns-1"))
    assert store.count(coll, Filter(must=(any_ns,))) == 8
    assert store.count(coll, Filter(must_not=(any_ns,))) == 4
    assert store.count(coll, Filter(must=(Match("n", any_of=(1, 2, 3)),))) == 3
    assert store.count(coll, Filter(must=(Match("flag", any_of=(True,)),))) == 6
    assert store.count(coll, Filter(must=(Match("n", any_of=(1, "x")),))) == 1  # mixed types
    assert store.count(coll, Filter(must=(Match("n", any_of=()),))) == 0
    assert store.count(coll, Filter(must_not=(Match("n", any_of=()),))) == 12
    flt = Filter(must=(Match("namespace", "ns-0"),), must_not=(Match("flag", True),))
    assert ids_of(store, coll, flt) == {pid(3), pid(9)}


# --- query-time filter conditions (kbsync/query/filters.py builds them) ---------------
FOLDERS = {0: [], 1: ["docs"], 2: ["docs", "docs/api"], 3: ["docs", "docs/api"],
           4: ["guide"], 5: ["guide", "guide/docs"]}


@pytest.fixture
def filtered(store, backend) -> str:
    """A collection with the chunk collection's filter indexes and points 0..5."""
    name = backend.name("flt")
    store.ensure_collection(name, dimension=DIM, keyword_indexes=INDEXES + ("folders", "kind"),
                            integer_indexes=("modified",))
    store.upsert(name, [chunk(n, folders=FOLDERS[n], modified=1_700_000_000 + 1000 * n,
                              kind="pdf" if n % 2 else "html") for n in FOLDERS])
    store.upsert(name, [chunk(9)])  # an older point: no folders, no modified
    store.ensure_collection(name, dimension=DIM, keyword_indexes=INDEXES + ("folders", "kind"),
                            integer_indexes=("modified",))  # idempotent
    return name


def test_any_of_matches_one_element_of_an_array(store, filtered) -> None:
    def folder(value: str) -> Filter:
        return Filter(must=(Match("folders", any_of=(value,)),))

    assert ids_of(store, filtered, folder("docs")) == {pid(1), pid(2), pid(3)}
    assert ids_of(store, filtered, folder("docs/api")) == {pid(2), pid(3)}
    assert ids_of(store, filtered, folder("guide/docs")) == {pid(5)}
    assert ids_of(store, filtered, folder("doc")) == set()  # exact keywords, no prefix match
    assert ids_of(store, filtered, Filter(must=(Match("folders", "guide"),))) == {pid(4), pid(5)}
    two = Filter(must=(Match("folders", any_of=("docs/api", "guide")),))
    assert ids_of(store, filtered, two) == {pid(2), pid(3), pid(4), pid(5)}


def test_range_on_integers(store, filtered) -> None:
    since = Filter(must=(Range("modified", gte=1_700_003_000),))
    assert ids_of(store, filtered, since) == {pid(3), pid(4), pid(5)}  # point 9 has none
    assert store.count(filtered, Filter(must=(Range("modified", lte=1_700_001_000),))) == 2
    between = Range("modified", gte=1_700_001_000.5, lte=1_700_004_000)
    assert ids_of(store, filtered, Filter(must=(between,))) == {pid(2), pid(3), pid(4)}
    # must_not of a range keeps the points without the field (here: the older point 9).
    assert ids_of(store, filtered, Filter(must_not=(Range("modified", gte=0),))) == {pid(9)}


def test_filters_combine_in_search(store, filtered) -> None:
    flt = (Filter.where(namespace="ns-a", kind="pdf")
           .and_also(Match("folders", any_of=("docs",)), Range("modified", gte=1_700_002_000)))
    hits = store.search(filtered, unit(3), limit=10, flt=flt)
    assert [h.id for h in hits] == [pid(3)]
    assert hits[0].payload["folders"] == ["docs", "docs/api"]
    store.delete(filtered, Filter(must=(Range("modified", lte=1_700_001_000),)))
    assert store.count(filtered) == 5


@pytest.mark.parametrize("bad", [Range("modified"), Range("modified", gte=float("nan")),
                                 Range("modified", gte=True), Range("", gte=1),
                                 Range("modified", gte=2, lte=1)])
def test_malformed_range_refused(store, filtered, bad: Range) -> None:
    with pytest.raises(UsageError):
        store.count(filtered, Filter(must=(bad,)))


@pytest.mark.parametrize("match", [Match("k"), Match("k", "v", any_of=("v",)), Match("k", 1.5)])
def test_malformed_match_refused(store, coll, match: Match) -> None:
    with pytest.raises(UsageError):
        store.count(coll, Filter(must=(match,)))


def test_search_orders_best_first_within_namespace(store, coll) -> None:
    store.upsert(coll, [chunk(n, f"ns-{n % 2}") for n in range(40)])
    hits = store.search(coll, unit(7), limit=5)
    assert hits[0].id == pid(7)
    assert hits[0].score == pytest.approx(1.0, abs=1e-4)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert hits[0].payload["n"] == 7
    in_ns = store.search(coll, unit(7), limit=10, flt=Filter.where(namespace="ns-0"))
    assert len(in_ns) == 10
    assert all(h.payload["namespace"] == "ns-0" for h in in_ns)
    assert pid(7) not in {h.id for h in in_ns}


def test_search_score_threshold(store, coll) -> None:
    store.upsert(coll, [chunk(n) for n in range(30)])
    every = store.search(coll, unit(3), limit=30)
    cut = every[5].score
    above = store.search(coll, unit(3), limit=30, score_threshold=cut)
    assert above and all(h.score >= cut - 1e-6 for h in above)
    assert len(above) < len(every)
    assert store.search(coll, unit(3), limit=30, score_threshold=1.01) == []


def test_search_validates_query(store, coll) -> None:
    store.upsert(coll, [chunk(1)])
    with pytest.raises(DimensionMismatch):
        store.search(coll, [1.0] * (DIM - 1), limit=3)
    with pytest.raises(InvalidVector):
        store.search(coll, [float("nan")] * DIM, limit=3)
    with pytest.raises(UsageError):
        store.search(coll, unit(1), limit=0)


# --- lifecycle ----------------------------------------------------------------
def test_close_and_reopen_persists(store, coll, reopen) -> None:
    store.upsert(coll, [chunk(n) for n in range(20)])
    store.delete_ids(coll, [pid(0)])
    store = reopen(store)
    assert store.count(coll) == 19
    assert store.search(coll, unit(5), limit=1)[0].id == pid(5)
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreError):
        store.count(coll)


def test_threads_share_one_store(store, coll) -> None:
    def work(t: int) -> int:
        store.upsert(coll, [chunk(t * 100 + i, f"ns-{t}") for i in range(50)])
        store.search(coll, unit(t), limit=3, flt=Filter.where(namespace=f"ns-{t}"))
        return store.count(coll, Filter.where(namespace=f"ns-{t}"))

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert list(pool.map(work, range(4))) == [50] * 4
    assert store.count(coll) == 200


@pytest.mark.parametrize("kind", ["edge", "local"])
def test_second_store_on_same_folder_is_unavailable(tmp_path: Path, kind: str) -> None:
    opener = (lambda: EdgeStore(tmp_path)) if kind == "edge" else (
        lambda: ServerStore.local(tmp_path))
    first = opener()
    try:
        first.ensure_collection("kb", dimension=DIM)
        with pytest.raises(StoreUnavailable) as info:
            opener()
        assert isinstance(info.value, TransientError)
    finally:
        first.close()
    second = opener()  # released on close
    assert second.collection_dimension("kb") == DIM
    second.close()


def test_open_store_picks_adapter(tmp_path: Path) -> None:
    edge = open_store(Settings(home=tmp_path, qdrant_url=None))
    try:
        assert isinstance(edge, EdgeStore)
        assert edge.path == tmp_path / "qdrant"
    finally:
        edge.close()
    server = open_store(Settings(home=tmp_path, qdrant_url="https://127.0.0.1:9",
                                 qdrant_api_key="secret"))
    assert isinstance(server, ServerStore)
    with pytest.raises(StoreUnavailable):  # nothing listens on port 9
        server.count("kb")
    server.close()


def test_edge_optimize_keeps_results(tmp_path: Path) -> None:
    with EdgeStore(tmp_path) as store:
        store.ensure_collection("kb", dimension=DIM, keyword_indexes=INDEXES)
        store.upsert("kb", [chunk(n) for n in range(300)])
        before = [h.id for h in store.search("kb", unit(4), limit=3)]
        store.optimize()
        assert store.count("kb") == 300
        assert [h.id for h in store.search("kb", unit(4), limit=3)] == before


# --- server adapter: HTTP error translation (a real local HTTP server, no Qdrant) ---
_MISSING = b'{"status":{"error":"Not found: Collection `kb` doesn\'t exist!"},"time":0.0}'


@pytest.fixture
def fake_qdrant() -> Iterator[tuple[str, dict]]:
    """A local HTTP server answering canned (status, headers, body) per path."""
    routes: dict[str, tuple[int, dict[str, str], bytes]] = {}

    class Handler(BaseHTTPRequestHandler):
        def _reply(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, headers, body = routes.get(self.path.split("?")[0], (404, {}, b"nothing"))
            self.send_response(status)
            for key, value in {"Content-Type": "application/json", **headers}.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = _reply

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", routes
    server.shutdown()
    server.server_close()


def test_server_missing_collection_reads_empty(fake_qdrant) -> None:
    url, routes = fake_qdrant
    routes["/collections/kb"] = (404, {}, _MISSING)
    routes["/collections/kb/points/count"] = (404, {}, _MISSING)
    with ServerStore.from_url(url) as store:
        assert store.collection_dimension("kb") is None
        assert store.count("kb") == 0
        assert store.search("kb", unit(1), limit=3) == []
        with pytest.raises(StoreError, match="does not exist"):
            store.upsert("kb", [chunk(1)])


@pytest.mark.parametrize(("status", "headers", "body", "error", "transient"), [
    (503, {}, b'{"status":{"error":"overloaded"}}', StoreUnavailable, True),
    (500, {}, b'{"status":{"error":"boom"}}', StoreUnavailable, True),
    (429, {"Retry-After": "2"}, b'{"status":{"error":"slow down"}}', StoreUnavailable, True),
    (401, {}, b'{"status":{"error":"bad key"}}', StoreError, False),
    (404, {}, b"<html>not qdrant</html>", StoreError, False),  # wrong URL prefix: not "missing"
    (200, {}, b'{"result": "garbage"}', StoreError, False),
])
def test_server_errors_are_translated(fake_qdrant, status, headers, body, error, transient) -> None:
    url, routes = fake_qdrant
    routes["/collections/kb/points/count"] = (status, headers, body)
    with ServerStore.from_url(url) as store:
        with pytest.raises(error) as info:
            store.count("kb")
    assert isinstance(info.value, TransientError) is transient
    assert info.value.__cause__ is not None
