"""kbsync.api: add_text through the ingest write path, search, stats, delete, lock."""

from __future__ import annotations

import pytest

from kbsync import api
from kbsync.errors import LockHeld, UsageError
from kbsync.catalog.lock import ingest_lock_path, write_lock

TEXT = ("# Key rotation\n\nTessera API keys must be rotated every 90 days. A rotated key keeps "
        "working for a 24-hour grace period.\n\n## Revocation\n\nRevoked keys answer 401.")


def test_add_text_twice_is_unchanged_and_searchable(settings):
    first = api.add_text(TEXT, "notes/keys", namespace="agent", settings=settings)
    assert first.status == "added" and first.chunks >= 1 and not first.partial
    assert first.embeddings_computed + first.embeddings_cached == first.chunks
    again = api.add_text(TEXT, "notes/keys", namespace="agent", settings=settings)
    assert again.to_dict() == {**first.to_dict(), "status": "unchanged",
                               "embeddings_computed": 0, "embeddings_cached": 0}
    hits = api.search("rotate API keys grace period", "agent", k=3, settings=settings)
    assert hits.results and hits.results[0].doc_id == "notes/keys"
    assert hits.results[0].heading_path.startswith("Key rotation")
    # another namespace sees nothing
    assert api.search("rotate API keys", "other", settings=settings).results == []
    stats = api.stats(settings=settings)
    assert stats.namespaces["agent"] == {"documents": 1, "chunks": first.chunks,
                                         "failed_embeddings": 0}


def test_changed_text_replaces_the_old_chunks(settings):
    with api.KnowledgeBase(settings) as kb:
        kb.add_text(TEXT, "notes/keys")
        changed = kb.add_text("Keys now rotate every 30 days.", "notes/keys")
        assert changed.status == "updated" and changed.chunks == 1
        assert kb.stats("default").namespaces["default"]["chunks"] == 1
        texts = [h.text for h in kb.search("rotate keys", k=5).results]
        assert texts == ["Keys now rotate every 30 days."]
        state = kb._open(embed=False).states.get("default", "notes/keys")
        assert state.root == api.API_ROOT and state.chunk_count == 1


def test_delete_removes_points_and_state(settings):
    added = api.add_text(TEXT, "notes/keys", settings=settings)
    gone = api.delete("notes/keys", settings=settings)
    assert gone.to_dict() == {"doc_id": "notes/keys", "namespace": "default", "deleted": True,
                              "chunks_removed": added.chunks}
    assert api.search("rotate keys", settings=settings).results == []
    assert api.stats("default", settings=settings).namespaces["default"]["documents"] == 0
    assert api.delete("notes/keys", settings=settings).deleted is False
    # after a delete the same text is new again
    assert api.add_text(TEXT, "notes/keys", settings=settings).status == "added"


def test_bad_arguments_are_usage_errors(settings):
    with pytest.raises(UsageError, match="text is empty"):
        api.add_text("  \n", "x", settings=settings)
    with pytest.raises(UsageError, match="doc_id"):
        api.add_text("text", " x", settings=settings)
    with pytest.raises(UsageError, match="namespace"):
        api.delete("x", "", settings=settings)


def test_add_text_waits_for_nobody_when_an_ingest_holds_the_lock(settings):
    with write_lock(ingest_lock_path(settings, "default")):
        with pytest.raises(LockHeld):
            api.add_text(TEXT, "notes/keys", settings=settings)
    assert api.add_text(TEXT, "notes/keys", settings=settings).status == "added"


def test_an_open_knowledge_base_follows_a_rollback_made_by_another_process(settings, tmp_path):
    """A long-lived reader (an agent's process) keeps one KnowledgeBase open; a ``kbsync
    rebuild --rollback`` in another process repoints the collection: the next call answers
    from the collection now active, as ``kbsync serve`` does (tests/serve/test_serve_rebuild.py),
    not from the one it opened."""
    import subprocess
    import sys

    from kbtest import TOPICS, hash_env, topic_queries, topic_share

    env = hash_env(None, settings.home, drop=("KBSYNC_", "PREFECT_API_URL"))  # the plain runner

    def kbsync(*args: str, **extra: str) -> None:
        done = subprocess.run([sys.executable, "-m", "kbsync", *args], env={**env, **extra},
                              capture_output=True, text=True, timeout=300, cwd="/")
        assert done.returncode == 0, done.stderr

    share = topic_share(tmp_path / "share", sites=True)
    kbsync("ingest", f"share={share}", "--json")
    kbsync("rebuild", "--queries", str(topic_queries(tmp_path / "q.jsonl")), "--json",
           KBSYNC_CHUNK_TOKENS="64", KBSYNC_CHUNK_OVERLAP="8")
    with api.KnowledgeBase(settings) as kb:
        assert kb.stats().collection == "kbsync__r1"
        assert kb.settings.chunk_tokens == 64  # the rebuilt collection's own build settings
        kbsync("rebuild", "--rollback", "--json")
        stats = kb.stats()
        assert stats.collection == "kbsync" and kb.settings.chunk_tokens != 64
        assert stats.namespaces["default"]["documents"] == len(TOPICS)
        hits = kb.search("the orchard3 site", k=1).results
        assert hits[0].doc_id == "share/d0/orchard3.md"
