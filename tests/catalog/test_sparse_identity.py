"""Each collection keeps the BM25 encoder it was built with (identity record ``sparse``).

kbsync's BM25 moved from its own encoder (``bm25-v1``) to Qdrant's (``SPARSE_VERSION``).
A store built before keeps writing and querying with the old one, so an upgrade neither
breaks its hybrid search nor reprocesses it; new collections get the new one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kbtest import write_tree
from kbsync.runtime import Runtime
from kbsync.errors import UsageError
from kbsync.ingest.discover import parse_root
from kbsync.catalog.identity import EMBEDDER, stored_embedder
from kbsync.ingest.runner import run_plain
from kbsync.catalog.state import META_KEY, utc_now
from kbsync.query.search import search
from kbsync.store.base import Filter
from kbsync.text.sparse import CURRENT, LEGACY
from kbsync.text.sparse_v1 import SPARSE_VERSION as V1

WORDS = ["zephyrine", "quillbrook", "marrowind", "tessellate", "glimmerfen"]


@pytest.fixture
def share(tmp_path):
    root = tmp_path / "share"
    write_tree(root, {f"doc{i}.md": f"# Doc {i}\n\nThe {WORDS[i]} policies of team {i}."
                      for i in range(5)})
    return root


def _ingest(runtime, root: Path) -> dict:
    return run_plain([parse_root(str(root))], runtime=runtime).to_dict()


def _record(runtime, sparse: str) -> None:
    """An identity record as an older release wrote it, before any point exists."""
    service = runtime.service
    runtime.states.write_meta(EMBEDDER, (), {
        "provider": service.provider, "model": service.model, "dimension": service.dimension,
        "sparse": sparse, "collection": runtime.collection, "recorded_at": utc_now(),
        "run_id": "older-release"})


def _top_doc(runtime, query: str) -> str:
    result = search(query, store=runtime.store, service=runtime.service,
                    collection=runtime.collection, mode="hybrid", k=1)
    return result.results[0].doc_id


def _sparse_hits(runtime, encoder, word: str) -> list[str]:
    points = runtime.store.sparse_search(runtime.collection, encoder.encode_query(word), limit=5)
    return [p.payload["doc_id"] for p in points]


def test_a_new_collection_records_and_uses_the_current_encoder(runtime, share):
    assert _ingest(runtime, share)["added"] == 5
    assert stored_embedder(runtime.states).sparse == CURRENT.version
    assert runtime.sparse is CURRENT
    assert _sparse_hits(runtime, CURRENT, "quillbrook") == ["share/doc1.md"]
    assert _top_doc(runtime, "quillbrook") == "share/doc1.md"


def test_a_legacy_collection_keeps_its_encoder_across_processes(settings, share):
    runtime = Runtime.open(settings)
    try:
        _record(runtime, V1)
        assert _ingest(runtime, share)["added"] == 5
        assert runtime.sparse is LEGACY
        # Written with the legacy scheme: its query finds the chunk, the new one does not.
        assert _sparse_hits(runtime, LEGACY, "marrowind") == ["share/doc2.md"]
        assert _sparse_hits(runtime, CURRENT, "marrowind") == []
    finally:
        runtime.close()
    again = Runtime.open(settings)  # a later run, after the upgrade: nothing reprocessed
    try:
        assert again.sparse is LEGACY
        assert _ingest(again, share)["unchanged"] == 5
        assert stored_embedder(again.states).sparse == V1
        assert _top_doc(again, "marrowind") == "share/doc2.md"
    finally:
        again.close()


def test_a_store_from_before_the_record_reads_as_legacy_and_records_it(settings, share):
    runtime = Runtime.open(settings)
    try:
        _record(runtime, V1)
        _ingest(runtime, share)
        runtime.store.delete(settings.state_collection, Filter.where(**{META_KEY: EMBEDDER}))
    finally:
        runtime.close()
    again = Runtime.open(settings)
    try:
        assert stored_embedder(again.states) is None
        assert again.sparse is LEGACY  # it holds points: they predate the record
        assert _top_doc(again, "tessellate") == "share/doc3.md"
        done = _ingest(again, share)
        assert done["unchanged"] == 5
        assert stored_embedder(again.states).sparse == V1
    finally:
        again.close()


def test_an_unknown_recorded_encoder_is_refused_and_nothing_is_lost(settings, share):
    runtime = Runtime.open(settings)
    try:
        _ingest(runtime, share)
        runtime.store.delete(settings.state_collection, Filter.where(**{META_KEY: EMBEDDER}))
        _record(runtime, "bm25-v9")
    finally:
        runtime.close()
    newer = Runtime.open(settings)
    try:
        before = newer.store.count(newer.collection)
        with pytest.raises(UsageError, match="bm25-v9.*upgrade kbsync"):
            _top_doc(newer, "zephyrine")
        with pytest.raises(UsageError, match="bm25-v9"):
            _ingest(newer, share)
        assert newer.store.count(newer.collection) == before
    finally:
        newer.close()
