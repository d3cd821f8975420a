"""What the knowledge base holds, per namespace (``kbsync stats``)."""

from __future__ import annotations

from kbsync.settings import Settings
from kbsync.state import StateStore
from kbsync.store.base import Filter, VectorStore


def collect_stats(store: VectorStore, settings: Settings, namespace: str | None = None) -> dict:
    """The JSON contract of ``kbsync stats --json``.

    Reads counts only; never loads the embedding model (the dimension shown is
    the collection's, which every stored vector has).
    """
    states = StateStore(store, settings.state_collection)
    per_ns = states.namespaces()
    if namespace is not None:
        per_ns = {namespace: per_ns.get(namespace, {"documents": 0, "partial": 0})}
    dimension = store.collection_dimension(settings.collection)
    namespaces = {}
    for ns, info in sorted(per_ns.items()):
        chunks = failed = 0
        if dimension is not None:
            chunks = store.count(settings.collection, Filter.where(namespace=ns))
            failed = store.count(settings.collection,
                                 Filter.where(namespace=ns, embedding_failed=True))
        namespaces[ns] = {"documents": info["documents"], "chunks": chunks,
                          "failed_embeddings": failed}
    return {
        "collection": settings.collection,
        "embedding": {"provider": settings.embed_provider.value,
                      "model": settings.embed_model_name(), "dimension": dimension},
        "namespaces": namespaces,
    }
