"""Who may call into one open edge shard at a time: reads beside writes, close alone.

qdrant-edge-py 0.9.0 releases the GIL inside ``query``, ``count``, ``retrieve``, ``scroll``
and ``update``, and its ``EdgeShard`` takes ``&self`` in all of them, synchronising inside
the engine (a mutex around the WAL, a read-write lock around the segment holder, as
Qdrant's server does for searches during updates and optimizations). So kbsync lets reads
run beside writes instead of queueing them behind a whole write batch: at a million chunks
a batch of 1,024 points holds the engine ~80 ms, and a hybrid search asks twice.
``tests/store/test_shard_gate.py`` checks the engine under concurrent reads, upserts,
deletes and seals.

What is still exclusive:

- writes among themselves (``Shard.lock``): batches, flushes, seals and index builds keep
  their order, and the flush/seal bookkeeping (``unflushed``, ``unsealed``) one owner;
- closing (:meth:`ShardGate.closing`): it waits for the reads in flight, and a read that
  starts after it fails with ``StoreError``, not with a call into a closed engine.

A seal still stalls readers of this process: ``optimize()`` holds the GIL (see
:mod:`kbsync.store.edge.seal`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from kbsync.errors import StoreError


class ShardGate:
    """Counts the reads in flight on one shard, and closes it only when none is.

    Invariant: once :meth:`closing` has begun, no read enters, and it returns only when
    every read that entered before it has left.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._readers = 0
        self._closed = False

    @contextmanager
    def reading(self, name: str) -> Iterator[None]:
        """Hold the shard open for one read call.

        Raises:
            StoreError: the collection was closed (or dropped) meanwhile.
        """
        with self._changed:
            if self._closed:
                raise StoreError(f"edge collection {name!r} was closed while a read waited")
            self._readers += 1
        try:
            yield
        finally:
            with self._changed:
                self._readers -= 1
                if self._readers == 0:
                    self._changed.notify_all()

    def closing(self) -> None:
        """Refuse new reads and wait for those in flight (idempotent; take it before the
        engine's ``close``, with ``Shard.lock`` held so no write is in flight either)."""
        with self._changed:
            self._closed = True
            self._changed.wait_for(lambda: self._readers == 0)
