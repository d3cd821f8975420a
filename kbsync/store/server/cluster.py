"""What kbsync asks of a Qdrant server or cluster: collection layout and write ordering.

Read from ``KBSYNC_QDRANT_*`` (:class:`kbsync.settings.Settings`) at the edge and
handed to :class:`kbsync.store.server.store.ServerStore`. The layout applies when
kbsync *creates* a collection; an existing collection keeps its own (Qdrant
changes shard counts only by re-creating, replication by moving replicas).

Defaults and why:

- ``shards`` / ``replication_factor`` / ``write_consistency_factor``: ``None``
  leaves the server's default (on a cluster: one shard per node at creation, one
  copy, one acknowledgement). docs/SCALING.md gives the values for a cluster.
- ``write_ordering``: ``medium`` (Qdrant's default is ``weak``). kbsync writes the
  same point ids again (a re-ingest, a heal re-upserting a point's vectors), and
  under ``weak`` two updates of one point may land on the replicas in different
  orders and leave them differing for good; ``medium`` sends every write of a
  shard through its current leader, so replicas apply them in one order.
  ``strong`` uses the permanent leader (writes wait while it is down).
- ``on_disk_vectors``: ``False``: dense vectors (and the sparse index) in RAM.
  Turn it on once the vectors would take over half a node's RAM: at 384
  dimensions a chunk replica holds ~3.5 KB in RAM (dense 1.5 KB, HNSW links,
  BM25 sparse vector and its index, payload indexes), so past ~5M chunk
  replicas on a 32 GiB node (docs/SCALING.md). The HNSW graph stays in RAM.
- ``on_disk_payload``: ``True``: payloads (chunk text and citation fields, the
  largest part of a point) are read from disk; the payload *indexes* that every
  filter uses stay in RAM. It is also Qdrant's own storage default.

Every write kbsync makes waits for the result (``wait=True``): the write order
(upsert -> delete stale -> commit state) relies on each step having been applied
before the next one starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from qdrant_client import models

from kbsync.errors import UsageError

WriteOrdering = Literal["weak", "medium", "strong"]


@dataclass(frozen=True)
class ClusterConfig:
    """Collection layout and write ordering for a Qdrant server or cluster.

    Attributes:
        shards: shards of a new collection (``None``: the server's default).
        replication_factor: copies of each shard (``None``: the server's default, 1).
        write_consistency_factor: replicas that must acknowledge a write before it
            returns (``None``: 1); at most ``replication_factor``.
        on_disk_vectors: keep original dense vectors and the sparse index on disk.
        on_disk_payload: keep payloads on disk (their indexes stay in RAM).
        write_ordering: Qdrant's ``ordering`` on every upsert and delete.
    """

    shards: int | None = None
    replication_factor: int | None = None
    write_consistency_factor: int | None = None
    on_disk_vectors: bool = False
    on_disk_payload: bool = True
    write_ordering: WriteOrdering = "medium"

    def __post_init__(self) -> None:
        """Refuse a layout no write could succeed on (``UsageError``, one line)."""
        for name in ("shards", "replication_factor", "write_consistency_factor"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UsageError(f"qdrant {name} must be at least 1, got {value}")
        if (self.write_consistency_factor or 1) > (self.replication_factor or 1):
            raise UsageError(
                f"write_consistency_factor {self.write_consistency_factor} exceeds the "
                f"replication factor {self.replication_factor or 1}: no write could succeed")

    @classmethod
    def from_settings(cls, settings: Any) -> ClusterConfig:
        """The ``KBSYNC_QDRANT_*`` values of a :class:`kbsync.settings.Settings`."""
        return cls(shards=settings.qdrant_shards,
                   replication_factor=settings.qdrant_replication_factor,
                   write_consistency_factor=settings.qdrant_write_consistency_factor,
                   on_disk_vectors=settings.qdrant_on_disk_vectors,
                   on_disk_payload=settings.qdrant_on_disk_payload,
                   write_ordering=settings.qdrant_write_ordering)

    def collection_kwargs(self) -> dict[str, Any]:
        """Layout arguments of ``QdrantClient.create_collection`` (unset ones left out)."""
        values = {"shard_number": self.shards, "replication_factor": self.replication_factor,
                  "write_consistency_factor": self.write_consistency_factor,
                  "on_disk_payload": self.on_disk_payload}
        return {k: v for k, v in values.items() if v is not None}

    def dense_params(self, dimension: int) -> models.VectorParams:
        """The cosine dense vector of a new collection."""
        return models.VectorParams(size=dimension, distance=models.Distance.COSINE,
                                   on_disk=self.on_disk_vectors or None)

    def sparse_params(self) -> models.SparseVectorParams:
        """The IDF sparse (BM25) vector of a new collection."""
        index = models.SparseIndexParams(on_disk=True) if self.on_disk_vectors else None
        return models.SparseVectorParams(modifier=models.Modifier.IDF, index=index)

    @property
    def ordering(self) -> models.WriteOrdering:
        """The ``ordering`` argument of every upsert and delete."""
        return models.WriteOrdering(self.write_ordering)
