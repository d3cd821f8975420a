"""The server adapter: qdrant-client against a Qdrant server or cluster (or its local mode).

- :mod:`~kbsync.store.server.store`: :class:`ServerStore`;
- :mod:`~kbsync.store.server.query`: filter, point and error translation, and the segment
  layout new collections get;
- :mod:`~kbsync.store.server.cluster`: :class:`ClusterConfig`, shards, replication and write
  ordering for new collections.

``ServerStore`` and ``ClusterConfig`` are re-exported here; importers name the module that
defines a name.
"""

from kbsync.store.server.cluster import ClusterConfig
from kbsync.store.server.store import ServerStore

__all__ = ["ClusterConfig", "ServerStore"]
