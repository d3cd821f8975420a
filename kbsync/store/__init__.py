"""Vector store: one small interface, two adapters.

- :class:`~kbsync.store.edge.EdgeStore`: the embedded default under
  ``$KBSYNC_HOME/qdrant`` (qdrant-edge-py, one writer per folder);
- :class:`~kbsync.store.server.ServerStore`: qdrant-client against
  ``KBSYNC_QDRANT_URL`` (or its local mode, used by the conformance tests).

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
    ScoredPoint,
    SparseVec,
    VectorStore,
)

if TYPE_CHECKING:
    from kbsync.settings import Settings

__all__ = ["DENSE", "SPARSE", "Filter", "Match", "Point", "ScoredPoint", "SparseVec", "VectorStore",
           "open_store"]


def open_store(settings: "Settings") -> VectorStore:
    """The store the settings ask for: a server when ``qdrant_url`` is set, else embedded.

    The embedded store locks ``settings.store_path`` until ``close()``; open
    one per process and share it (it is safe to use from several threads).

    Raises:
        StoreUnavailable: the embedded folder is held by another process.
        StoreError: the folder or client cannot be set up.
    """
    if settings.qdrant_url:
        from kbsync.store.server import ServerStore

        key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
        return ServerStore.from_url(settings.qdrant_url, key)
    from kbsync.store.edge import EdgeStore

    return EdgeStore(settings.store_path)
