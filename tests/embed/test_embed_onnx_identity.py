"""A store built with the torch MiniLM is not mixed with the ONNX int8 backend's vectors.

The two backends share weights but not vectors (cosine ~0.99), so the int8 model has
its own name: the embedder identity refuses it on a torch-built store (and the other
way round) with the message naming both, the fingerprint and the chunker's fit differ,
and the store keeps working with the model it was built with.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from kbtest import write_tree

from kbsync.embed import build_embedding_service
from kbsync.errors import EmbedderMismatch
from kbsync.ingest.discover import parse_root
from kbsync.catalog.identity import stored_embedder
from kbsync.ingest.runner import run_plain
from kbsync.query.search import search
from kbsync.settings import Settings


def _with_model(runtime, model: str):
    settings = Settings(**{**runtime.settings.model_dump(), "embed_provider": "local",
                           "embed_model": model})
    return replace(runtime, settings=settings, service=build_embedding_service(settings))


@pytest.mark.slow
def test_a_torch_built_store_refuses_the_int8_backend(runtime, tmp_path) -> None:
    root = tmp_path / "share"
    write_tree(root, {f"doc{i}.md": f"# Doc {i}\n\nKeys rotate every {30 * i} days." for i in range(3)})
    torch_rt = _with_model(runtime, "all-MiniLM-L6-v2")
    assert run_plain([parse_root(str(root))], runtime=torch_rt).to_dict()["added"] == 3
    assert stored_embedder(torch_rt.states).model == "all-MiniLM-L6-v2"

    int8_rt = _with_model(runtime, "all-MiniLM-L6-v2-int8")
    assert int8_rt.fingerprint != torch_rt.fingerprint
    message = (r"built with local/all-MiniLM-L6-v2 \(384 dims.*configured embedder is "
               r"local/all-MiniLM-L6-v2-int8 .*KBSYNC_EMBED_MODEL back to the store's")
    with pytest.raises(EmbedderMismatch, match=message):
        run_plain([parse_root(str(root))], runtime=int8_rt)
    with pytest.raises(EmbedderMismatch, match=message):
        search("key rotation", store=int8_rt.store, service=int8_rt.service,
               collection=int8_rt.collection, mode="dense")
    # Refused before anything was written: the store still runs on the model it was built with.
    again = run_plain([parse_root(str(root))], runtime=torch_rt).to_dict()
    assert again["unchanged"] == 3 and again["failed"] == 0
    assert stored_embedder(torch_rt.states).model == "all-MiniLM-L6-v2"
