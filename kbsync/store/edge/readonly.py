"""Reading an embedded store that cannot be written: through a private copy.

qdrant-edge-py 0.9.0 maps a shard's files read-write even to load it for a search
(``Failed to open mmap payload storage: Permission denied``), so a store on a read-only
mount, or in a folder this user may read but not write, cannot be opened where it lies.
:class:`~kbsync.store.edge.store.EdgeStore` then loads each collection it reads from a
copy of its folder in a private temporary folder (``$TMPDIR/kbsync-readonly-*``, 0700,
removed on close) and refuses every write with one ``StoreReadOnly`` line.

Invariants and limits:

- The copy is taken under the store's folder lock when its ``.lock`` file exists (a
  read-only descriptor can hold ``flock``), so no writer of this store changes the files
  while they are copied; on a read-only mount no writer can exist at all.
- Copying costs the collection's size on disk, once per process and collection: the
  warning gives both, and a store too large for the temporary folder fails with one line.
  Holes stay holes (``cp --sparse=always``): a sealed segment preallocates ~88 MiB of
  sparse files that are never written out.
- Nothing under the store's own folder is ever created, changed or removed.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from kbsync.errors import StoreReadOnly

log = logging.getLogger(__name__)

COPY_PREFIX = "kbsync-readonly-"


def refuse_write(folder: Path, what: str) -> StoreReadOnly:
    """The one line of a write on a store read through a private copy."""
    return StoreReadOnly(
        f"edge store at {folder} cannot be written (read-only mount or no write permission): "
        f"{what} refused; searches read a private copy, but an ingest, a removal or a repair "
        "needs a writable KBSYNC_HOME (copy it with cp -a and point KBSYNC_HOME there) or a "
        "Qdrant server (KBSYNC_QDRANT_URL)")


def disk_usage(folder: Path) -> int:
    """Bytes ``folder``'s files occupy on disk (allocated blocks, not apparent sizes)."""
    total = 0
    for parent, _dirs, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(parent, name)).st_blocks * 512
            except OSError:
                continue
    return total


class PrivateCopies:
    """Private copies of the collections of one read-only store, removed by :meth:`remove`."""

    def __init__(self, store_path: Path, cause: str) -> None:
        self.store_path = store_path
        self.cause = cause
        self._top: Path | None = None

    def copy(self, folder: Path, name: str) -> Path:
        """A private copy of the collection folder ``folder``; returns its path.

        Raises:
            StoreReadOnly: the copy could not be made (no space in the temporary folder,
                an unreadable file); the message names the cause and what to do.
        """
        if self._top is None:
            self._top = Path(tempfile.mkdtemp(prefix=COPY_PREFIX))  # 0700, this user's
        target = self._top / name
        started = time.monotonic()
        try:
            _copy_tree(folder, target)
        except (OSError, subprocess.CalledProcessError) as exc:
            shutil.rmtree(target, ignore_errors=True)
            detail = getattr(exc, "stderr", None) or str(exc)
            raise StoreReadOnly(
                f"edge store at {self.store_path} cannot be written ({self.cause}), and its "
                f"collection {name!r} could not be copied to {self._top} to be read "
                f"({' '.join(str(detail).split())[:200]}); free space there (TMPDIR), or copy "
                "KBSYNC_HOME to a writable folder and point KBSYNC_HOME there") from exc
        # INFO: a search on a read-only mount is a normal read, and says nothing more
        # than one on a writable home; -v shows what the copy cost
        log.info("edge store at %s cannot be written (%s): reading collection %s from a "
                 "private copy (%.1f MiB on disk, copied in %.1f s); writes are refused",
                 self.store_path, self.cause, name, disk_usage(target) / 2**20,
                 time.monotonic() - started)
        return target

    def remove(self) -> None:
        """Remove every copy (idempotent)."""
        top, self._top = self._top, None
        if top is not None:
            shutil.rmtree(top, ignore_errors=True)


def _copy_tree(source: Path, target: Path) -> None:
    """``source`` copied to ``target`` with its holes, modes and times, made writable
    for this user (the engine maps the copy read-write)."""
    if shutil.which("cp") is not None:
        subprocess.run(["cp", "-R", "--preserve=mode,timestamps", "--sparse=always",
                        "--no-target-directory", str(source), str(target)],
                       check=True, capture_output=True, text=True)
    else:  # pragma: no cover - coreutils is on every Linux kbsync runs on
        shutil.copytree(source, target)
    for parent, dirs, files in os.walk(target):
        for entry in (*dirs, *files):
            path = os.path.join(parent, entry)
            os.chmod(path, os.lstat(path).st_mode & 0o7777 | 0o600 | (
                0o100 if entry in dirs else 0))
    os.chmod(target, 0o700)
