"""A run that writes nothing leaves the embedded store unwritten: no flush, no seal (issue 42).

``ensure_collection`` on a collection that has everything asked only reads, so a no-op sync
(whose one store call that could write is that one) counts no write; then neither the
run's first step (the seal) nor the close flushes.
"""

from __future__ import annotations

from kbsync.store import Point
from kbsync.store.edge.store import EdgeStore

ID = "00000000-0000-0000-0000-000000000001"
ASKED = {"dimension": 4, "keyword_indexes": ["namespace"], "sparse": False}


def test_a_complete_collection_is_only_read_and_its_store_stays_unwritten(tmp_path):
    with EdgeStore(tmp_path) as store:
        store.ensure_collection("c", **ASKED)
        store.upsert("c", [Point(ID, {"namespace": "n"}, [0.1, 0.2, 0.3, 0.4], None)])
        assert not store.unwritten()
    with EdgeStore(tmp_path) as store:
        store.ensure_collection("c", **ASKED)
        assert store.unwritten() and store.revision() == 0
        assert store.seal("c") == {"points": 0, "seconds": 0.0}
        assert store.count("c") == 1
    with EdgeStore(tmp_path) as store:  # closed without a flush: nothing was lost
        assert store.count("c") == 1
        store.ensure_collection("c", **{**ASKED, "keyword_indexes": ["namespace", "doc_id"]})
        assert not store.unwritten()  # a missing index is a write, counted
