"""What the knowledge base holds, per namespace (``kbsync stats``)."""

from __future__ import annotations

from kbsync.catalog.identity import stored_embedder
from kbsync.settings import Settings
from kbsync.catalog.state import StateStore
from kbsync.store.base import Filter, VectorStore


def collect_stats(store: VectorStore, settings: Settings, namespace: str | None = None) -> dict:
    """The JSON contract of ``kbsync stats --json``.

    Reads counts only; never loads the embedding model. ``embedding`` is what the
    store records it was built with (see :func:`_embedding`).
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
    return {"collection": settings.collection, **_embedding(states, settings, dimension),
            "namespaces": namespaces}


def _embedding(states: StateStore, settings: Settings, dimension: int | None) -> dict:
    """The embedder the store records (``embedding``), and the configured one when it differs.

    A store from before the record existed shows the configured embedder with
    ``embedding_recorded: false``. Provider and model are compared, not the
    dimension: knowing the configured one may need the model loaded.
    """
    configured = {"provider": settings.embed_provider.value, "model": settings.embed_model_name()}
    stored = stored_embedder(states)
    if stored is None:
        return {"embedding": {**configured, "dimension": dimension}, "embedding_recorded": False}
    data = {"embedding": {"provider": stored.provider, "model": stored.model,
                          "dimension": stored.dimension}, "embedding_recorded": True}
    if configured != {"provider": stored.provider, "model": stored.model}:
        data["configured_embedding"] = configured
    return data


def empty_stats(settings: Settings, namespace: str | None = None) -> dict:
    """What :func:`collect_stats` reports for a store that holds nothing yet (opens nothing)."""
    return {
        "collection": settings.collection,
        "embedding": {"provider": settings.embed_provider.value,
                      "model": settings.embed_model_name(), "dimension": None},
        "embedding_recorded": False,
        "namespaces": ({} if namespace is None else
                       {namespace: {"documents": 0, "chunks": 0, "failed_embeddings": 0}}),
    }
