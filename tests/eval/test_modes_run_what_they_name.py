"""Each evaluation mode runs the store query it names (issue 13.1).

The bug: ``ModeSpec.search_kwargs`` (now ``ModeSpec.request``) left ``mode`` out for ``dense``, which meant
search's own default, hybrid, so every report showed two identical hybrid columns.
The store here is a real embedded engine that also records which queries ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from kbsync.embed import EmbeddingService, HashEmbedder
from kbsync.eval.run import EvalQuery, parse_modes, run_mode
from kbsync.models import Chunk, SourceFile
from kbsync.store.edge.store import EdgeStore
from kbsync.catalog.schema import CHUNK_BOOL_INDEXES, CHUNK_INDEXES, PreparedDoc, build_points
from kbsync.text.sparse import LEGACY

DIM = 64
TEXTS = {
    "docs/keys.md": "API keys rotate every ninety days through the vault console.",
    "docs/upload.md": "Uploads above two gigabytes fail with error ERR_7Q4Z.",
    "docs/backup.md": "Backups run nightly and are kept for thirty days.",
}


class RecordingEdgeStore(EdgeStore):
    """The real embedded store; remembers the name of each search method called."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.calls: list[str] = []

    def search(self, *args, **kwargs):
        self.calls.append("dense")
        return super().search(*args, **kwargs)

    def sparse_search(self, *args, **kwargs):
        self.calls.append("sparse")
        return super().sparse_search(*args, **kwargs)


@dataclass
class EvalRuntime:
    """What :func:`run_mode` reads from a runtime."""

    store: RecordingEdgeStore
    service: EmbeddingService
    collection: str = "kb"


@pytest.fixture
def runtime(tmp_path: Path):
    store = RecordingEdgeStore(tmp_path / "qdrant")
    service = EmbeddingService(HashEmbedder(DIM), cache=None)
    store.ensure_collection("kb", dimension=DIM, keyword_indexes=CHUNK_INDEXES, sparse=True,
                            bool_indexes=CHUNK_BOOL_INDEXES)
    for doc_id, text in TEXTS.items():
        source = SourceFile(doc_id=doc_id, root="docs", path=Path(doc_id), rel_path=doc_id,
                            size=len(text), mtime_ns=0, content_hash="h")
        chunk = Chunk(doc_id=doc_id, chunk_index=0, text=text, heading_path="",
                      page_start=None, page_end=None, token_count=len(text.split()))
        vectors = service.embed_passages([text]).vectors
        store.upsert("kb", build_points(PreparedDoc(source, [chunk], vectors, [False]), "ns",
                                        sparse=LEGACY))  # no identity record: read as legacy
    yield EvalRuntime(store=store, service=service)
    store.close()


# Hybrid fuses a dense and a BM25 query in kbsync.query.fusion (the same in both adapters).
STORE_CALLS = {"dense": ["dense"], "hybrid": ["dense", "sparse"]}


@pytest.mark.parametrize("mode", ["dense", "hybrid"])
def test_each_mode_runs_the_store_query_it_names(runtime, mode):
    queries = [EvalQuery(1, "how often do keys rotate", ("docs/keys.md",)),
               EvalQuery(2, "ERR_7Q4Z upload error", ("docs/upload.md",))]
    (spec,) = parse_modes([mode])
    outcomes = run_mode(queries, spec, runtime=runtime, namespace="ns", k=3, warm_up=False)
    assert runtime.store.calls == STORE_CALLS[mode] * 2
    assert [o.mode for o in outcomes] == [mode, mode]


def test_every_mode_spec_names_its_search_mode_explicitly():
    # Nothing may rely on search's own default: that default has changed before.
    for spec in parse_modes(["dense", "hybrid"]):
        assert spec.request("q", namespace="ns", k=5).mode.value == spec.mode
