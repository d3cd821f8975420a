"""Embedding failures during a sync: nothing good is lost, partial documents heal.

The provider is the real hash embedder behind a switch that makes batches
containing a marker word fail transiently, as an API outage would.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from kbtest import write_tree
from kbsync.ingest.discover import parse_root
from kbsync.embed.base import TextKind
from kbsync.embed.hash import HashEmbedder
from kbsync.embed.service import EmbeddingService
from kbsync.errors import EmbeddingOutage, EmbeddingTransientError
from kbsync.ingest.summary import counts_of
from kbsync.ingest.runner import run_plain
from kbsync.query.search import search
from kbsync.store.base import Filter


class Flaky:
    """HashEmbedder that fails every batch holding ``marker`` while ``broken``."""

    def __init__(self, marker: str = "FLAKY") -> None:
        self.inner = HashEmbedder(dimension=384)
        self.provider, self.model, self.dimension = "hash", self.inner.model, 384
        self.marker, self.broken, self.calls = marker, True, 0

    def embed_batch(self, texts, kind: TextKind):
        self.calls += 1
        if self.broken and any(self.marker in t for t in texts):
            raise EmbeddingTransientError("503 from the test endpoint")
        return self.inner.embed_batch(texts, kind)


@pytest.fixture
def flaky_runtime(runtime):
    flaky = Flaky()
    service = EmbeddingService(flaky, cache=None, batch_size=1, max_attempts=2,
                               sleep=lambda _s: None, fail_fast_after=0)
    return replace(runtime, service=service), flaky


def run(runtime, root):
    return run_plain([parse_root(str(root))], runtime=runtime).to_dict()


def snapshot(runtime):
    return {p.id: p.payload for p in runtime.store.scroll(runtime.collection)}


def test_a_document_that_cannot_be_embedded_keeps_its_previous_version(flaky_runtime, tmp_path):
    runtime, flaky = flaky_runtime
    share = tmp_path / "share"
    write_tree(share, {"a.md": "# A\n\nalpha text", "b.md": "# B\n\nbeta text"})
    assert run(runtime, share)["added"] == 2
    before = snapshot(runtime)
    (share / "a.md").write_text("# A\n\nalpha rewritten FLAKY", encoding="utf-8")
    # The one document that needed embedding failed: the run reads as an outage (the same
    # rule in the flow and the plain loop), with its counts on the error.
    with pytest.raises(EmbeddingOutage) as raised:
        run(runtime, share)
    summary = counts_of(raised.value)
    assert summary["failed"] == 1 and summary["updated"] == 0 and summary["unchanged"] == 1
    assert summary["failures"][0]["error"] == "EmbeddingFailed"
    assert snapshot(runtime) == before
    assert runtime.states.get("default", "share/a.md").content_hash == before[next(
        i for i, p in before.items() if p["doc_id"] == "share/a.md")]["content_hash"]
    flaky.broken = False
    assert run(runtime, share)["updated"] == 1  # retried on the next run


def test_partial_document_is_stored_flagged_hidden_and_healed(flaky_runtime, tmp_path):
    runtime, flaky = flaky_runtime
    share = tmp_path / "share"
    body = "# Guide\n\n## Setup\n\nInstall the agent.\n\n## Trouble\n\nFLAKY section about errors."
    write_tree(share, {"guide.md": body})
    first = run(runtime, share)
    assert first["added"] == 1 and first["partial"] == 1 and first["embeddings_failed"] == 1
    state = runtime.states.get("default", "share/guide.md")
    assert state.status.value == "partial"
    flagged = list(runtime.store.scroll(runtime.collection, Filter.where(embedding_failed=True)))
    assert len(flagged) == 1 and "FLAKY" in flagged[0].payload["text"]
    found = search("section about errors", store=runtime.store, service=runtime.service,
                   collection=runtime.collection, k=10)
    assert all(not h.text.count("FLAKY") for h in found.results)  # never returned

    flaky.broken = False
    calls = flaky.calls
    healed = run(runtime, share)
    assert healed["updated"] == 1 and healed["embeddings_computed"] == 1
    assert healed["partial"] == 0 and flaky.calls == calls + 1  # only the flagged chunk
    assert runtime.states.get("default", "share/guide.md").status.value == "ok"
    assert runtime.store.count(runtime.collection, Filter.where(embedding_failed=True)) == 0
    assert run(runtime, share)["unchanged"] == 1
