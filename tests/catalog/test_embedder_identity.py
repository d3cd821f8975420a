"""Embedder identity (issue 10.4): a collection records the embedder that built it.

Searching a hash-built store with another 384-dimensional model used to return
unrelated hits with exit 0, and ``stats`` showed the configured model instead of the
stored one. Core paths run on both adapters; the CLI is covered by
``tests/flows/test_identity_cli.py``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kbtest import other_warnings, write_tree
from kbsync import api
from kbsync.ingest.discover import parse_root
from kbsync.embed import build_embedding_service
from kbsync.errors import EmbedderMismatch
from kbsync.catalog.identity import EMBEDDER, stored_embedder
from kbsync.ingest.runner import run_plain
from kbsync.query.search import search
from kbsync.settings import DEFAULT_LOCAL_MODEL, Settings
from kbsync.text.sparse import SPARSE_VERSION
from kbsync.catalog.state import META_KEY, StateStore
from kbsync.query.stats import collect_stats
from kbsync.store.base import Filter



@pytest.fixture
def share(tmp_path):
    root = tmp_path / "share"
    write_tree(root, {f"doc{i}.md": f"# Doc {i}\n\nKey rotation note number {i}, every "
                                    f"{30 * i} days." for i in range(5)})
    return root


def _ingest(runtime, root: Path, **kwargs) -> dict:
    return run_plain([parse_root(str(root))], runtime=runtime, **kwargs).to_dict()


def _other(runtime, **overrides):
    """The same store with another configured embedder."""
    settings = Settings(**{**runtime.settings.model_dump(), **overrides})
    return replace(runtime, settings=settings, service=build_embedding_service(settings))


def _points(runtime) -> dict:
    return {p.id: p.payload for p in runtime.store.scroll(runtime.collection)}


def test_collection_records_its_embedder_and_refuses_another(adapter_runtime, share):
    runtime = adapter_runtime
    _ingest(runtime, share)
    stored = stored_embedder(runtime.states)
    assert stored is not None
    assert (stored.provider, stored.model, stored.dimension, stored.sparse) == \
        ("hash", "hash-384", 384, SPARSE_VERSION)
    other = _other(runtime, embed_dimensions=256)
    for mode in ("dense", "hybrid"):
        with pytest.raises(EmbedderMismatch) as err:
            search("key rotation", store=other.store, service=other.service,
                   collection=other.collection, mode=mode)
        message = str(err.value)
        assert "\n" not in message and "hash/hash-384" in message and "hash/hash-256" in message
        assert "KBSYNC_COLLECTION" in message
    before = _points(runtime)
    for force in (False, True):  # --force does not re-embed in place either
        with pytest.raises(EmbedderMismatch):
            _ingest(other, share, force=force)
    assert _points(runtime) == before
    # The way out: a new collection for the new model.
    fresh = replace(other, settings=Settings(**{**other.settings.model_dump(),
                                                "collection": "kb_v2"}))
    fresh = replace(fresh, states=StateStore(fresh.store, fresh.settings.state_collection))
    assert _ingest(fresh, share)["added"] == 5
    assert stored_embedder(fresh.states).model == "hash-256"
    assert search("key rotation", store=fresh.store, service=fresh.service,
                  collection="kb_v2").results


def test_stats_reports_what_the_store_holds(adapter_runtime, share):
    runtime = adapter_runtime
    _ingest(runtime, share)
    local = Settings(**{**runtime.settings.model_dump(), "embed_provider": "local"})
    data = collect_stats(runtime.store, local)  # loads no model
    assert data["embedding"] == {"provider": "hash", "model": "hash-384", "dimension": 384}
    assert data["embedding_recorded"] is True
    assert data["configured_embedding"] == {"provider": "local", "model": DEFAULT_LOCAL_MODEL}
    same = collect_stats(runtime.store, runtime.settings)
    assert "configured_embedding" not in same
    assert same["namespaces"]["default"]["documents"] == 5  # the meta record is not a document


def test_store_without_a_record_is_searchable_and_adopts_on_next_ingest(adapter_runtime, share):
    runtime = adapter_runtime
    _ingest(runtime, share)
    # A store built before the record existed: drop it.
    runtime.store.delete(runtime.settings.state_collection, Filter.where(**{META_KEY: EMBEDDER}))
    assert stored_embedder(runtime.states) is None
    assert search("key rotation", store=runtime.store, service=runtime.service,
                  collection=runtime.collection).results
    data = collect_stats(runtime.store, runtime.settings)
    assert data["embedding_recorded"] is False and data["embedding"]["dimension"] == 384
    again = _ingest(runtime, share)
    assert again["unchanged"] == 5
    assert any("adopting the configured hash/hash-384" in w for w in again["warnings"])
    assert stored_embedder(runtime.states).model == "hash-384"
    assert collect_stats(runtime.store, runtime.settings)["embedding_recorded"] is True
    assert not other_warnings(_ingest(runtime, share)["warnings"])


def test_dry_run_on_a_new_store_records_nothing(adapter_runtime, share):
    runtime = adapter_runtime
    assert _ingest(runtime, share, dry_run=True)["added"] == 5
    assert stored_embedder(runtime.states) is None
    _ingest(runtime, share)
    assert stored_embedder(runtime.states) is not None


def test_python_api_refuses_another_embedder(settings):
    first = api.add_text("Tessera keys rotate every 90 days.", "notes/keys", "agent",
                         settings=settings)
    assert first.status == "added"
    assert api.search("key rotation", "agent", settings=settings).results
    other = Settings(**{**settings.model_dump(), "embed_dimensions": 256})
    with pytest.raises(EmbedderMismatch):
        api.search("key rotation", "agent", settings=other)
    with pytest.raises(EmbedderMismatch):
        api.add_text("Another note.", "notes/other", "agent", settings=other)
    stats = api.stats(settings=other)
    assert stats.embedding["model"] == "hash-384"
    assert stats.configured_embedding == {"provider": "hash", "model": "hash-256"}
    assert api.add_text("Tessera keys rotate every 90 days.", "notes/keys", "agent",
                        settings=settings).status == "unchanged"


@pytest.mark.slow
def test_local_model_search_on_a_hash_store_is_refused(runtime, share):
    """The reproduction: both embedders are 384-dimensional, so only the record tells."""
    _ingest(runtime, share)
    local = _other(runtime, embed_provider="local")
    with pytest.raises(EmbedderMismatch, match="all-MiniLM-L6-v2"):
        search("key rotation", store=local.store, service=local.service,
               collection=local.collection, mode="dense")
