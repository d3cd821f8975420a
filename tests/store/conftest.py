"""Backends for the store conformance suite: one parametrized fixture, real engines.

- ``edge``: qdrant-edge-py;
- ``local``: qdrant-client local mode (``QdrantClient(path=...)``);
- ``server``: a real Qdrant at ``KBSYNC_TEST_QDRANT_URL`` (skipped when unset);
  collections get a unique name and are dropped afterwards.

Edge and local folders live on tmpfs (``/dev/shm``) when there is one: both
fsync on every write (local mode once per point, ~40x slower on a busy CI
disk), and this suite checks semantics, not disks. The lock and optimize
tests in ``test_conformance.py`` still use ``tmp_path`` on the real disk.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Callable, Iterator

import pytest

from kbsync.store import VectorStore
from kbsync.store.edge.store import EdgeStore
from kbsync.store.server.store import ServerStore

SERVER_ENV = "KBSYNC_TEST_QDRANT_URL"
BACKENDS = ("edge", "local", "server")


class Backend:
    """Opens stores of one kind on one location, and cleans up after the test."""

    def __init__(self, kind: str, path: Path, url: str | None) -> None:
        self.kind = kind
        self.path = path
        self.url = url
        self.prefix = f"kbt{uuid.uuid4().hex[:10]}"
        self._open: list[VectorStore] = []

    def name(self, base: str = "kb") -> str:
        """A collection name unique to this test (a server is shared between runs)."""
        return f"{self.prefix}_{base}"

    def open(self) -> VectorStore:
        """A new store on this backend's location (close the previous one first)."""
        store: VectorStore
        if self.kind == "edge":
            store = EdgeStore(self.path)
        elif self.kind == "local":
            store = ServerStore.local(self.path)
        else:
            api_key = os.environ.get("KBSYNC_TEST_QDRANT_API_KEY")
            store = ServerStore.from_url(self.url or "", api_key)
        self._open.append(store)
        return store

    def cleanup(self) -> None:
        for store in self._open:
            store.close()
        if self.kind == "server":
            from qdrant_client import QdrantClient

            api_key = os.environ.get("KBSYNC_TEST_QDRANT_API_KEY")
            client = QdrantClient(url=self.url, api_key=api_key, check_compatibility=False)
            try:
                for coll in client.get_collections().collections:
                    if coll.name.startswith(self.prefix):
                        client.delete_collection(coll.name)
            finally:
                client.close()


def _store_dir(tmp_path: Path) -> tuple[Path, bool]:
    """A fresh folder on tmpfs when available (True), else under ``tmp_path`` (False)."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return Path(tempfile.mkdtemp(prefix="kbsync-test-", dir=shm)), True
    return tmp_path / "store", False


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Each conformance test runs once per backend."""
    url = os.environ.get(SERVER_ENV)
    if request.param == "server" and not url:
        pytest.skip(f"{SERVER_ENV} is unset: no Qdrant server to run the conformance suite on")
    folder, on_tmpfs = _store_dir(tmp_path)
    b = Backend(request.param, folder, url)
    try:
        yield b
    finally:
        try:
            b.cleanup()
        finally:
            if on_tmpfs:
                shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def store(backend: Backend) -> VectorStore:
    """An open store on the current backend (closed by the backend's cleanup)."""
    return backend.open()


@pytest.fixture
def reopen(backend: Backend) -> Callable[[VectorStore], VectorStore]:
    """Close a store and open a fresh one on the same location."""

    def _reopen(old: VectorStore) -> VectorStore:
        old.close()
        return backend.open()

    return _reopen
