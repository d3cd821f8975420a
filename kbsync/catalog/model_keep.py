"""Upgrades do not strand a store: with no model configured, a collection keeps its own.

The local default changes between releases (torch ``all-MiniLM-L6-v2`` before,
``all-MiniLM-L6-v2-int8`` now). With the local provider and ``KBSYNC_EMBED_MODEL``
unset, an existing collection of the embedded store is served and written with the
bundled model its embedder record names (:mod:`kbsync.catalog.identity`), so it answers
after an upgrade instead of being refused with ``EmbedderMismatch``. What is still
refused: a configured model that differs (``KBSYNC_EMBED_MODEL`` set), another provider,
or a record naming a model this release does not bundle; ``kbsync rebuild`` with a model
named moves a collection to it.

Called by :func:`kbsync.catalog.active.resolve` for a collection without a pointer (one
with a pointer has its model there). It costs one read of the state collection when the
collection exists. Not covered: a Qdrant server (its collections keep the configured
model; set it by hand).
"""

from __future__ import annotations

import logging

from kbsync.catalog.identity import EMBEDDER
from kbsync.catalog.state import StateStore
from kbsync.settings import EmbedProvider, Settings
from kbsync.store.base import VectorStore

log = logging.getLogger(__name__)

EMBEDDER_RECORD = EMBEDDER  # the embedder identity's meta kind


def model_open(settings: Settings) -> bool:
    """Whether kbsync picks the model of ``settings.collection``: no model configured
    (:attr:`Settings.model_unset`), the embedded store, and no pointer resolved yet (a
    pointer's build names the model). Both the choice for a new collection
    (``kbsync.ingest.model_choice``) and the keeping of an existing one's ask here."""
    return settings.model_unset and not settings.qdrant_url and settings.active_of is None


def keep_recorded_model(settings: Settings, store: VectorStore | None = None) -> Settings:
    """``settings`` with the collection's recorded local model when none is configured.

    ``store``: the open store, else one is opened briefly (a reader: a running ingest
    serves it). Returns ``settings`` unchanged in every case the module doc leaves out.
    """
    if not model_open(settings):
        return settings
    from kbsync.store.edge.query import collection_created

    if not collection_created(settings.store_path, settings.collection):
        return settings
    record = _recorded_embedder(settings, store)
    if record is None or record.get("provider") != EmbedProvider.LOCAL.value:
        return settings
    model = str(record.get("model"))
    from kbsync.embed.local import MODELS

    if model == settings.embed_model_name() or model not in MODELS:
        return settings  # the default already, or not bundled: check_embedder says what differs
    log.info("collection %s was built with local/%s and no model is configured: keeping it "
             "(KBSYNC_EMBED_MODEL with kbsync rebuild moves it to another)",
             settings.collection, model)
    return settings.model_copy(update={"embed_model": model})


def _recorded_embedder(settings: Settings, store: VectorStore | None) -> dict | None:
    own = store is None
    if store is None:
        from kbsync.store import open_store

        store = open_store(settings)
    try:
        records = StateStore(store, settings.state_collection).read_meta(EMBEDDER_RECORD)
    finally:
        if own:
            store.close()
    return records[0] if records else None
