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

In a home shared with a group (``KBSYNC_SHARED_GROUP``, issue 37) its members trust each
other already (each can write the store), so ``<home>/run`` is the group's: 2770, any
member's, the socket 0660, and a peer of another uid is accepted when that user is a
member of the group. Others are still refused. The fallback folders below stay private to
one user, so members reach another member's relay only on the home path.

Where (:func:`socket_path`): ``<home>/run/store.sock``; when that is over the
Unix socket path limit, ``$XDG_RUNTIME_DIR/kbsync/<hash>.sock`` (when the
variable names a directory of this user's), else
``<tempdir>/kbsync-<uid>/<hash>.sock``. The hash is of the store's resolved
path, so one store has one socket; the ingest and its readers compute the
same path from the same environment.
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import socket
import stat
import struct
import tempfile
from pathlib import Path

from kbsync.errors import HomeExposed, RelayUntrusted, StoreError
from kbsync.home import PRIVATE, HomeAccess, current_access, make_dir

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
def folder_access(folder: Path) -> HomeAccess:
    """Who may use ``folder``: the home's shared group for ``<home>/run`` in a shared home,
    else this user only (the fallback folders are per user)."""
    access = current_access()
    return access if access.shared and folder.name == "run" else PRIVATE


def socket_mode(folder: Path) -> int:
    """The mode of a socket in ``folder``: 0600, or 0660 in a shared home's ``run``."""
    return folder_access(folder).file_mode


def prepare_folder(folder: Path) -> None:
    """Server side: create ``folder`` 0700 (2770 the group's, in a shared home), or accept an
    existing one only if it is private (or the group's).

    Raises:
        RelayUntrusted: it exists and is not a private directory of this user's (or the
            shared group's).
        StoreError: it cannot be created or inspected.
    """
    access = folder_access(folder)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        if access.shared:
            make_dir(folder, access)
        else:
            folder.mkdir(mode=0o700)
    except FileExistsError:
        pass  # checked below like a new one: created by us, by an earlier run, or by someone else
    except (OSError, HomeExposed) as exc:
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
    access = folder_access(folder)
    if access.shared:
        return _shared_folder_problem(info, access)
    if info.st_uid != os.getuid():
        return f"is owned by uid {info.st_uid}, not by this user (uid {os.getuid()})"
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        return f"has mode {mode:04o}: others can enter it (it must be 0700)"
    return None


def _shared_folder_problem(info: os.stat_result, access: HomeAccess) -> str | None:
    mode = stat.S_IMODE(info.st_mode)
    if info.st_gid != access.gid:
        return f"belongs to group gid {info.st_gid}, not to the shared group {access.group}"
    if mode & 0o007:
        return f"has mode {mode:04o}: others can enter it (it must be 2770)"
    if info.st_uid != os.getuid() and not is_member(info.st_uid, access):
        return f"is owned by uid {info.st_uid}, who is not a member of {access.group}"
    return None


def is_member(uid: int, access: HomeAccess) -> bool:
    """Whether user ``uid`` belongs to ``access``'s group (primary or supplementary)."""
    try:
        user = pwd.getpwuid(uid)
        group = grp.getgrgid(access.gid) if access.gid is not None else None
    except KeyError:
        return False
    return group is not None and (user.pw_gid == group.gr_gid or user.pw_name in group.gr_mem)


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
    """Refuse a relay served by a process of another uid (root's included), unless the
    socket is in a shared home's ``run`` and that uid is a member of the group.

    Raises:
        RelayUntrusted: the peer's uid is not this process's.
    """
    uid = peer_uid(sock)
    access = folder_access(path.parent)
    if uid is not None and uid != os.getuid() and not (access.shared and is_member(uid, access)):
        raise RelayUntrusted(f"refusing the relay socket {path}: it is served by uid {uid}, "
                             f"not by this user (uid {os.getuid()})")
