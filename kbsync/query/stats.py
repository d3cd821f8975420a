"""What the knowledge base holds, per namespace (``kbsync stats``)."""

from __future__ import annotations

from kbsync.catalog.access import access_condition
from kbsync.catalog.identity import stored_embedder
from kbsync.settings import Settings
from kbsync.catalog.state import StateStore
from kbsync.store.base import Filter, Match, VectorStore


def collect_stats(store: VectorStore, settings: Settings, namespace: str | None = None, *,
                  as_user: str | None = None) -> dict:
    """The JSON contract of ``kbsync stats --json``.

    Reads counts only; never loads the embedding model. ``embedding`` is what the
    store records it was built with (see :func:`_embedding`). The counts are those of the
    documents the reader may read (:func:`kbsync.catalog.access.access_condition`: the
    process, narrowed to ``as_user``); a filtered reader is shown no namespace it sees
    nothing of, unless it names it.

    Raises:
        PermissionsNotCaptured, UsageError: see ``access_condition``.
    """
    states = StateStore(store, settings.state_collection)
    per_ns = states.namespaces()
    if namespace is not None:
        per_ns = {namespace: per_ns.get(namespace, {"documents": 0, "partial": 0})}
    dimension = store.collection_dimension(settings.collection)
    namespaces = {}
    for ns, info in sorted(per_ns.items()):
        access = access_condition(states, ns, as_user)
        counts = _counts(store, settings, ns, info["documents"], access, dimension)
        if access is None or counts["documents"] or namespace is not None:
            namespaces[ns] = counts
    return {"collection": settings.collection, **_embedding(states, settings, dimension),
            "namespaces": namespaces}


def _counts(store: VectorStore, settings: Settings, namespace: str, documents: int,
            access: Match | None, dimension: int | None) -> dict:
    """One namespace's documents, chunks and failed embeddings, as ``access`` lets them be
    seen (``None``: all of them; ``documents`` is then already known)."""
    scope = Filter.where(namespace=namespace)
    if access is not None:
        scope = scope.and_also(access)
        documents = store.count(settings.state_collection, scope)
    chunks = failed = 0
    if dimension is not None:
        chunks = store.count(settings.collection, scope)
        failed = store.count(settings.collection, scope.and_also(Match("embedding_failed", True)))
    return {"documents": documents, "chunks": chunks, "failed_embeddings": failed}


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
