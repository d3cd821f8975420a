"""Where the read relay listens, and who may be behind it (issue 22).

A reader that connects to another user's socket would take that user's
answers for its own store's: poisoned search hits, exit 0. So both ends check:

- the **folder** of the socket is a real directory (not a link), owned by this
  user, with no group or other access. The server creates it 0700 and refuses
  one that fails the check (it never chmods or reuses someone else's); the
  client refuses to connect through one.
- the **peer**: the client asks the kernel who listens (``SO_PEERCRED``) and
  refuses a process of another uid, before it sends or reads anything.

Either refusal is a one-line :class:`~kbsync.errors.RelayUntrusted` naming the
path. On a platform without ``SO_PEERCRED`` the folder check stands alone:
only this user (or root) can put a socket in a 0700 folder of this user's.

Where (:func:`socket_path`): ``<home>/run/store.sock``; when that is over the
Unix socket path limit, ``$XDG_RUNTIME_DIR/kbsync/<hash>.sock`` (when the
variable names a directory of this user's), else
``<tempdir>/kbsync-<uid>/<hash>.sock``. The hash is of the store's resolved
path, so one store has one socket; the ingest and its readers compute the
same path from the same environment.
"""

from __future__ import annotations

import hashlib
import os
import socket
import stat
import struct
import tempfile
from pathlib import Path

from kbsync.errors import RelayUntrusted, StoreError

SOCKET_NAME = "store.sock"
MAX_SOCKET_PATH = 100  # AF_UNIX paths are limited to 107 bytes on Linux
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


# --- where ---------------------------------------------------------------------------------
def socket_path(home: Path, store_path: Path) -> Path:
    """The relay socket of the store at ``store_path`` (see the module doc for the order)."""
    path = Path(home).absolute() / "run" / SOCKET_NAME
    if _fits(path):
        return path
    digest = hashlib.sha256(os.fsencode(str(Path(store_path).resolve()))).hexdigest()[:24]
    candidates = [folder / f"{digest}.sock" for folder in _fallback_folders()]
    return next((c for c in candidates if _fits(c)), candidates[-1])


def _fits(path: Path) -> bool:
    return len(os.fsencode(str(path))) <= MAX_SOCKET_PATH


def _fallback_folders() -> list[Path]:
    folders = []
    runtime = runtime_dir()
    if runtime is not None:
        folders.append(runtime / "kbsync")
    folders.append(Path(tempfile.gettempdir()) / f"kbsync-{os.getuid()}")
    return folders


def runtime_dir() -> Path | None:
    """``$XDG_RUNTIME_DIR`` when it is an absolute path to a directory this user owns.

    After ``su`` or ``sudo`` the variable often still names the first user's
    folder; that one is skipped (the temp folder is used), rather than trusted.
    """
    value = os.environ.get("XDG_RUNTIME_DIR", "")
    if not value or not os.path.isabs(value):
        return None
    try:
        info = os.lstat(value)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        return None
    return Path(value)


# --- the folder ----------------------------------------------------------------------------
def prepare_folder(folder: Path) -> None:
    """Server side: create ``folder`` 0700, or accept an existing one only if it is private.

    Raises:
        RelayUntrusted: it exists and is not a private directory of this user's.
        StoreError: it cannot be created or inspected.
    """
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        folder.mkdir(mode=0o700)
    except FileExistsError:
        pass  # checked below like a new one: created by us, by an earlier run, or by someone else
    except OSError as exc:
        raise StoreError(f"cannot create the relay folder {folder}: {exc}") from exc
    problem = folder_problem(folder)
    if problem is not None:
        raise RelayUntrusted(f"relay folder {folder} {problem}; no reads are served there "
                             f"(remove it, or make it yours: chmod 700)")


def check_folder(folder: Path) -> bool:
    """Client side: whether ``folder`` exists; raises when it exists and is not private.

    Raises:
        RelayUntrusted: the folder is another user's, a link, or open to others.
    """
    try:
        problem = folder_problem(folder)
    except FileNotFoundError:
        return False
    if problem is not None:
        raise RelayUntrusted(f"refusing the relay socket in {folder}: the folder {problem} "
                             "(another user could serve fake results there); remove it")
    return True


def folder_problem(folder: Path) -> str | None:
    """Why ``folder`` is no private relay folder of this user's, or ``None`` when it is.

    Raises:
        FileNotFoundError: it does not exist.
        StoreError: it cannot be inspected.
    """
    try:
        info = folder.lstat()
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise StoreError(f"cannot inspect the relay folder {folder}: {exc}") from exc
    if not stat.S_ISDIR(info.st_mode):
        return "is not a directory (a link or a file)"
    if info.st_uid != os.getuid():
        return f"is owned by uid {info.st_uid}, not by this user (uid {os.getuid()})"
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        return f"has mode {mode:04o}: others can enter it (it must be 0700)"
    return None


# --- the peer ------------------------------------------------------------------------------
def peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process at the other end of a connected Unix socket, or ``None``
    where the platform cannot tell (no ``SO_PEERCRED``)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    _pid, uid, _gid = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, option,
                                                       _PEERCRED.size))
    return uid


def check_peer(sock: socket.socket, path: Path) -> None:
    """Refuse a relay served by a process of another uid (root's included).

    Raises:
        RelayUntrusted: the peer's uid is not this process's.
    """
    uid = peer_uid(sock)
    if uid is not None and uid != os.getuid():
        raise RelayUntrusted(f"refusing the relay socket {path}: it is served by uid {uid}, "
                             f"not by this user (uid {os.getuid()})")
