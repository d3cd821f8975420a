"""The embedded adapter: qdrant-edge-py in this process, its relay, its disk-space checks.

- :mod:`~kbsync.store.edge.store`: :class:`EdgeStore`, one folder, one writer, with
  :mod:`~kbsync.store.edge.extras` (paging, sealing, dropping),
  :mod:`~kbsync.store.edge.query` (filter, config and query translation),
  :mod:`~kbsync.store.edge.seal` and :mod:`~kbsync.store.edge.check` (sealed segments and
  their checks), :mod:`~kbsync.store.edge.shard_gate` (reads beside writes) and
  :mod:`~kbsync.store.edge.heap` (returning the heap after a seal);
- :mod:`~kbsync.store.edge.relay`, :mod:`~kbsync.store.edge.relay_client` and
  :mod:`~kbsync.store.edge.relay_socket`: other processes' reads of a held folder;
- :mod:`~kbsync.store.edge.diskspace`: free-space checks, so a full disk is ``DiskFull``,
  never a SIGBUS.

``EdgeStore`` is re-exported here; importers name the module that defines a name.
"""

from kbsync.store.edge.store import EdgeStore

__all__ = ["EdgeStore"]
