"""Open a file so that the check "it lies inside its root" and the read are one operation.

Discovery checks that a symlink stays inside its root, but a file is read later (the plan
hashes it, a worker converts it). Whoever can write the share could, in between, swap a
checked file (or a folder above it) for a link to a file only the ingesting user may read.
:func:`open_within` therefore opens first, then asks the kernel where the open descriptor
really points (``/proc/self/fd/N``), and everything is read from that descriptor: no swap
after the open can change what is read, and a swap before it is seen.
"""

from __future__ import annotations

import functools
import logging
import os

from kbsync.errors import SymlinkOutsideRoot
from kbsync.models import display_path

log = logging.getLogger(__name__)

_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
# O_NONBLOCK: a FIFO swapped in after discovery is opened without waiting for a writer
# (and then refused as not a regular file); it changes nothing for regular files.


def open_within(path: str | os.PathLike, within: str | os.PathLike | None) -> int:
    """A read-only descriptor of ``path``; the caller closes it.

    Invariant: with ``within`` (a directory; resolved here), the returned descriptor's
    real path lies under ``within``. Links are followed as the path says (discovery keeps
    those that stay inside the root); where they lead is checked on the open file.

    Raises:
        OSError: the open failed (``PermissionError``, ``FileNotFoundError``, ...).
        SymlinkOutsideRoot: the opened file is outside ``within`` (nothing was read).
    """
    fd = os.open(path, _OPEN_FLAGS)
    if within is None:
        return fd
    try:
        root = _resolved(os.fspath(within))
        real = _opened_path(fd, path)
        if not _is_under(real, root):
            raise SymlinkOutsideRoot(
                f"{display_path(path)}: it now leads outside its root {display_path(root)} "
                f"(to {display_path(real)}), a link swapped in after discovery; not read")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _opened_path(fd: int, path: str | os.PathLike) -> str:
    """Where ``fd`` really points: the kernel's own answer, not a second path lookup."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        # No /proc (a bare chroot): resolve the path and check it names the open file.
        # Weaker (a swap between the two lookups is possible), so it is said once.
        _warn_no_proc()
        real = os.path.realpath(path)
        opened, named = os.fstat(fd), os.stat(real)
        if (opened.st_dev, opened.st_ino) != (named.st_dev, named.st_ino):
            return f"{real} (replaced while opened)"  # never under the root: refused
        return real


@functools.lru_cache(maxsize=256)
def _resolved(root: str) -> str:
    """The root's real path, once per root: resolving it per file cost 3x the read
    itself. A root swapped for a link later is still caught: the open file's real
    path then lies elsewhere and is refused."""
    return os.path.realpath(root)


def _is_under(real: str, root: str) -> bool:
    return real == root or real.startswith(root.rstrip("/") + "/")


_warned = False


def _warn_no_proc() -> None:
    global _warned
    if not _warned:
        _warned = True
        log.warning("/proc/self/fd is not available: files are checked against their root "
                    "by path, which a link swapped in at the same moment can defeat")
