"""The store ``kbsync serve`` reads, shared with the nightly ingest (issue 40).

The embedded engine admits one process per store folder. ``serve`` must never lock the
ingest out, and must keep answering while it runs, so the store changes hands:

- **No ingest running:** ``serve`` opens the folder itself (:class:`StoreHolder` *direct*)
  and serves the read relay on the store's socket (:mod:`kbsync.store.edge.relay`), so the
  owner's own ``kbsync search`` still works, with :attr:`RelayServer.on_release` set.
- **An ingest starts:** it finds the folder locked and asks the relay to ``release`` it
  (:func:`kbsync.store.edge.relay_client.ask_release`). ``serve`` stops handing out the
  store, lets the requests in flight finish, closes it (which stops its relay) and, until the
  ingest's relay answers (at most :data:`HANDOVER_S`), only waits for that relay: it never
  snatches the folder back in between. Requests arriving meanwhile wait for it (~0.1 s).
- **The ingest ends:** the relay client opens the folder directly
  (:class:`~kbsync.store.edge.relay_client.RelayStore`), without a relay. From then on that
  store is handed to no new request; once the requests using it finish, the holder closes it
  and the next request opens the folder again *direct*, relay included. A writer starting in
  between finds no relay to ask and waits for it
  (:func:`~kbsync.store.edge.relay_client.take_or_ask`).

On a Qdrant server (``KBSYNC_QDRANT_URL``) there is nothing to hand over: one client,
shared by every request (*server*).
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, TypeVar

from kbsync.errors import RelayUntrusted, StoreUnavailable
from kbsync.settings import Settings

log = logging.getLogger(__name__)

HANDOVER_S = 30.0
"""After a release, how long ``serve`` waits for the writer's relay instead of the folder."""
HELD_WAIT_S = 5.0
"""How long a request waits for the relay of a process that took the folder unasked: its
relay comes up within a second of the open (an ingest); one that serves none (a foreign
holder) is ``StoreUnavailable`` within the query budget, not a ``QueryTimeout``."""
_DRAIN_S = 30.0  # the longest a release waits for the requests using the store
_POLL_S = 0.05
T = TypeVar("T")


class StoreHolder:
    """One store for every request of ``serve`` (module doc).

    Invariants: at most one store is open; it is closed only when no request uses it;
    ``mode`` is ``idle``, ``direct``, ``relay`` or ``server``.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._cond = threading.Condition()
        self._store: Any = None
        self._retiring: Any = None  # a writer's ended relay store, closed by its last user
        self._users = 0
        self._releasing = False
        self._yield_until = 0.0
        self._closed = False
        self.mode = "idle"
        self.handovers = 0

    # --- use -------------------------------------------------------------------------------
    @contextmanager
    def use(self) -> Iterator[Any]:
        """The store, for one request; closed in between only by a release."""
        with self._cond:
            while self._releasing or self._retiring is not None:
                self._cond.wait()
            if self._closed:
                raise StoreUnavailable("kbsync serve is stopping")
            if self._store is None:
                self._store, self.mode = self._open()
            self._users += 1
            store = self._store
        try:
            yield store
        finally:
            self._done_with(store)

    def _done_with(self, store: Any) -> None:
        """One request is done with ``store``. A relay store whose writer ended opened the
        folder itself, without a relay (``_direct``): it is handed out no more, and the
        last request using it closes it, so the next one holds the folder again, relay
        included, and a writer starting now can ask for it (before, steady requests kept
        it open and such a writer was refused)."""
        with self._cond:
            self._users -= 1
            if self._store is store and getattr(store, "_direct", None) is not None:
                self._store, self.mode, self._retiring = None, "idle", store
            last = self._retiring is store and self._users == 0
            self._cond.notify_all()
        if not last:
            return
        try:
            store.close()
        finally:
            with self._cond:
                self._retiring = None
                self._cond.notify_all()

    def run(self, work: Callable[[Any], T]) -> T:
        """``work(store)``; once more when a relay store lost its writer mid-call."""
        for attempt in (1, 2):
            with self.use() as store:
                try:
                    return work(store)
                except StoreUnavailable:
                    if attempt == 2 or self.mode != "relay":
                        raise
                    log.info("the writer's relay went away during a request: asking again")
        raise AssertionError("unreachable")

    # --- open and hand over ------------------------------------------------------------------
    def _open(self) -> tuple[Any, str]:
        from kbsync.store import open_store

        if self.settings.qdrant_url:
            return open_store(self.settings), "server"
        from kbsync.home import open_home
        from kbsync.store.edge.relay import socket_path
        from kbsync.store.edge.relay_client import RelayStore, open_reader
        from kbsync.store.edge.store import EdgeStore

        open_home(self.settings.home, shared_group=self.settings.shared_group)
        path, sock = self.settings.store_path, socket_path(self.settings.home,
                                                          self.settings.store_path)
        while time.monotonic() < self._yield_until:  # a writer asked: its relay, not the folder
            try:
                relayed = RelayStore.connect(path, sock)
                self._yield_until = 0.0  # the writer has it: from now on, the usual order
                log.info("reading %s through the writer's relay (pid %s)", path, relayed.pid)
                return relayed, "relay"
            except RelayUntrusted:
                raise
            except Exception:  # noqa: BLE001 - not up yet (absent, refused): wait for it
                time.sleep(_POLL_S)
        try:
            store = EdgeStore(path)
        except StoreUnavailable:
            log.info("%s is held by another process: reading through its relay", path)
            return open_reader(path, sock, wait_s=HELD_WAIT_S), "relay"
        if store.serve_readers(sock):
            store._relay.on_release = self._release  # an ingest asking gets the folder
        log.info("serving %s directly", path)
        return store, "direct"

    def _release(self) -> None:
        """A writer asked for the folder (on the relay's thread of its own)."""
        with self._cond:
            if self._releasing or self.mode != "direct":
                return
            self._releasing = True
            self._yield_until = time.monotonic() + HANDOVER_S
            deadline = time.monotonic() + _DRAIN_S
            while self._users and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())
            store, self._store, self.mode = self._store, None, "idle"
        try:
            if store is not None:
                store.close()
            self.handovers += 1
            log.info("handed the store over to a writer; reading through its relay")
        finally:
            with self._cond:
                self._releasing = False
                self._cond.notify_all()

    def close(self) -> None:
        """Close the store once no request uses it (idempotent)."""
        with self._cond:
            self._closed = True
            deadline = time.monotonic() + _DRAIN_S
            while self._users and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())
            store, self._store, self.mode = self._store, None, "idle"
        if store is not None:
            store.close()
