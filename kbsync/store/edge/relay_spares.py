"""The spare connections of a :class:`~kbsync.store.edge.relay_client.RelayStore`.

A ``RelayStore`` sends a call on its first connection when that one is free; while another
thread's call holds it, on a spare one, so that calls from several threads (``kbsync serve``
during an ingest) wait for the writer side by side. This holds the spares: idle ones are kept
while the relay lasts, a new one is opened only while fewer than the limit are open, and one
the relay closed is dropped when next taken. Where reads go (a new relay, the folder itself)
is never decided here: that stays with the first connection.
"""

from __future__ import annotations

import select
import socket
import threading
from typing import Callable


class SpareConnections:
    """Spare connections to one relay, at most ``most()`` open (read at each call)."""

    def __init__(self, open_connection: Callable[[], socket.socket | None],
                 most: Callable[[], int]) -> None:
        self._open = open_connection  # a new checked, greeted connection, or None
        self._most = most
        self._lock = threading.Lock()  # guards _idle and _count
        self._idle: list[socket.socket] = []
        self._count = 0  # open: idle or in a call

    @property
    def count(self) -> int:
        """Spare connections open now, idle or in a call."""
        with self._lock:
            return self._count

    def take(self) -> socket.socket | None:
        """An idle connection the relay has not closed, or a new one while fewer than
        ``most()`` are open; ``None`` when there is none to have."""
        with self._lock:
            while self._idle:
                sock = self._idle.pop()
                if not peer_closed(sock):
                    return sock
                sock.close()
                self._count -= 1
            if self._count >= self._most():
                return None
            self._count += 1
        opened = self._open()
        if opened is None:
            with self._lock:
                self._count -= 1
        return opened

    def keep(self, sock: socket.socket, *, usable: bool) -> None:
        """``sock`` back among the idle ones after a call; closed instead when the store's
        reads no longer go to a relay (``usable`` false)."""
        with self._lock:
            if usable:
                self._idle.append(sock)
                return
            self._count -= 1
        sock.close()

    def lose(self, sock: socket.socket) -> None:
        """Close a connection that failed (a second call for one socket does nothing)."""
        with self._lock:
            if sock.fileno() == -1:
                return
            self._count -= 1
        sock.close()

    def close_idle(self) -> None:
        """Close every idle connection (those in a call close when they come back unusable,
        or when next taken after the relay closed them)."""
        with self._lock:
            idle, self._idle = self._idle, []
            self._count -= len(idle)
        for sock in idle:
            sock.close()


def peer_closed(sock: socket.socket) -> bool:
    """Whether an idle connection was closed by the server (or holds unasked-for bytes)."""
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)
