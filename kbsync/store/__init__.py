"""Vector store: one small interface, two adapters.

- :class:`~kbsync.store.edge.store.EdgeStore`: the embedded default under
  ``$KBSYNC_HOME/qdrant`` (qdrant-edge-py, one writer per folder);
- :class:`~kbsync.store.server.store.ServerStore`: qdrant-client against
  ``KBSYNC_QDRANT_URL`` (or its local mode, used by the conformance tests);
- :class:`~kbsync.store.edge.relay_client.RelayStore`: read-only, the embedded
  store of another process (a running ingest) through its relay socket.

Adapter modules are imported lazily so that importing the interface does not
load either engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kbsync.store.base import (
    DENSE,
    SPARSE,
    Filter,
    Match,
    Point,
    Range,
    ScoredPoint,
    VectorStore,
)

if TYPE_CHECKING:
    from kbsync.settings import Settings

__all__ = ["DENSE", "SPARSE", "Filter", "Match", "Point", "Range", "ScoredPoint", "VectorStore",
           "open_store"]


def open_store(settings: "Settings", *, serve_readers: bool = False) -> VectorStore:
    """The store the settings ask for: a server when ``qdrant_url`` is set, else embedded.

    The embedded folder admits one process, locked until ``close()``; open one
    store per process and share it (it is safe to use from several threads).
    With ``serve_readers`` (the ingest and eval flows) the holder also serves
    other processes' reads on a Unix socket (:mod:`kbsync.store.edge.relay`). A
    folder held by such a process opens as a read-only
    :class:`~kbsync.store.edge.relay_client.RelayStore` whose writes raise
    ``StoreUnavailable``.

    Raises:
        StoreUnavailable: the embedded folder is held by a process that serves
            no reads (or its relay fails).
        StoreError: the folder or client cannot be set up.
        HomeExposed: the embedded home is open to other users (:mod:`kbsync.home`).
    """
    if settings.qdrant_url:
        from kbsync.store.server.cluster import ClusterConfig
        from kbsync.store.server.store import ServerStore

        key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
        return ServerStore.from_url(settings.qdrant_url, key,
                                    cluster=ClusterConfig.from_settings(settings))
    from kbsync.home import open_home
    from kbsync.store.edge.relay import socket_path
    from kbsync.store.edge.relay_client import open_reader, take_or_ask

    open_home(settings.home, shared_group=settings.shared_group)  # HomeExposed: others can read it
    relay_socket = socket_path(settings.home, settings.store_path)
    if serve_readers:
        # `kbsync serve` holding it hands it over (kbsync.serve.holder); an ingest does not
        store = take_or_ask(settings.store_path, relay_socket)
        if store is None:
            return open_reader(settings.store_path, relay_socket)
        store.serve_readers(relay_socket)
        return store
    return open_reader(settings.store_path, relay_socket)
