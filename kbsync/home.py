"""Who may read and write ``KBSYNC_HOME``: the user who owns it, or a group shared on purpose.

The home holds chunk texts (payload pages), vectors, the embedding cache and the
write locks: whoever can read it can read the index, and whoever can open its
lock files can lock its owner out. So, like PostgreSQL's data folder and ssh's
keys:

- kbsync creates the home and every folder under it 0700 and every file 0600,
  whatever the umask. The embedded engine and the embedding cache write files
  of their own, so a process that opens a home runs from then on with umask 077
  (:func:`use_umask`): what it creates afterwards, anywhere, is private to its user.
- It refuses (:class:`~kbsync.errors.HomeExposed`, one line naming the path and the
  fix) to open a home that group or others can read, write or enter, or that is not
  its user's, checking the home folder and kbsync's own parts in it
  (:data:`KBSYNC_PARTS`; other files a person keeps beside them are theirs).
- ``KBSYNC_SHARED_GROUP=<group>`` shares it with one group on purpose: folders 2770
  (new files inherit the group), files 0660, umask 007; others are still refused,
  and so is a part that belongs to another group. Every member can use everything
  kbsync makes there (issue 37): ``run/`` (the relay), the cache database and its
  journals (:func:`make_file`), the locks, the pointers, the store; on each open a
  member gives the group what it gives itself on its own entries (:func:`_share_own`),
  which heals a home an earlier version left member-private.

Invariant: a home :func:`open_home` returned from grants nothing to anyone but its
owner (and the shared group, when set). Limits: the check runs when a home is
opened, not continuously; what a person chmods later is caught by the next open.
See docs/SECURITY.md.
"""

from __future__ import annotations

import grp
import logging
import os
import pwd
import shlex
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

from kbsync.errors import HomeExposed

log = logging.getLogger(__name__)

KBSYNC_PARTS = ("qdrant", "cache", "locks", "active", "run")
"""The folders kbsync keeps under its home; the permission check walks these."""


@dataclass(frozen=True)
class HomeAccess:
    """Who may use a home: its owner only (``group`` None), or its owner and ``group``."""

    group: str | None = None
    gid: int | None = None

    @classmethod
    def of(cls, shared_group: str | None) -> "HomeAccess":
        """The access of a ``KBSYNC_SHARED_GROUP`` setting (None or empty: owner only).

        Raises:
            HomeExposed: the group does not exist.
        """
        if not shared_group:
            return PRIVATE
        try:
            return cls(shared_group, grp.getgrnam(shared_group).gr_gid)
        except KeyError:
            raise HomeExposed(f"KBSYNC_SHARED_GROUP={shared_group!r} names no group of this "
                              "system; create it (groupadd) or unset the setting") from None

    @property
    def shared(self) -> bool:
        return self.gid is not None

    @property
    def dir_mode(self) -> int:
        """Mode of a folder kbsync creates: 0700, or 2770 (setgid: new files get the group)."""
        return 0o2770 if self.shared else 0o700

    @property
    def file_mode(self) -> int:
        """Mode of a file kbsync creates: 0600, or 0660."""
        return 0o660 if self.shared else 0o600

    @property
    def umask(self) -> int:
        """The process umask while a home is open, so the engine's own files get these modes."""
        return 0o007 if self.shared else 0o077

    def forbidden_bits(self) -> int:
        """Permission bits no entry under the home may have."""
        return 0o007 if self.shared else 0o077


PRIVATE = HomeAccess()

_state_lock = threading.Lock()
_process_access: HomeAccess | None = None  # the access of the last home opened here


def current_access() -> HomeAccess:
    """The access of the home this process opened last; owner only before any."""
    return _process_access or PRIVATE


def use_umask(access: HomeAccess | None = None) -> HomeAccess:
    """Set this process's umask to ``access``'s (default: :func:`current_access`).

    Process-wide on purpose: the embedded engine and the cache create files from
    threads and native code that no per-call mode reaches.
    """
    global _process_access
    with _state_lock:
        access = access or _process_access or PRIVATE
        _process_access = access
        os.umask(access.umask)
    return access


def make_dir(path: Path, access: HomeAccess | None = None) -> Path:
    """Create ``path`` (and missing parents) with ``access``'s folder mode, whatever the
    umask; an existing folder is left as it is (the check decides about it)."""
    access = access or current_access()
    path = Path(path)
    missing = [p for p in (path, *path.parents) if not p.exists()]
    path.mkdir(parents=True, exist_ok=True)
    for folder in reversed(missing):
        try:
            if access.gid is not None:  # shared: the folder takes the group
                os.chown(folder, -1, access.gid)
            os.chmod(folder, access.dir_mode)
        except FileNotFoundError:  # removed meanwhile by someone else: nothing to set
            continue
        except PermissionError as exc:  # chgrp to a group this user is not in
            raise HomeExposed(f"cannot give {folder} to group {access.group} "
                              f"(KBSYNC_SHARED_GROUP): {exc.strerror}; the user running kbsync "
                              "must be a member of the shared group") from exc
    return path


def make_file(path: Path, access: HomeAccess | None = None) -> Path:
    """Create the empty file ``path`` with ``access``'s file mode, whatever the umask, unless
    it exists (then it is left as it is).

    For files another library creates with its own mode under the umask (SQLite makes a
    database 0644, so 0640 under a shared home's umask 007, and its journal, WAL and shared
    memory files take the database's mode): made first, they get the group's 0660.
    """
    access = access or current_access()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, access.file_mode)
    except FileExistsError:
        return Path(path)
    try:
        if access.gid is not None:
            os.fchown(fd, -1, access.gid)
        os.fchmod(fd, access.file_mode)
    finally:
        os.close(fd)
    return Path(path)


def open_home(home: Path, *, shared_group: str | None = None) -> HomeAccess:
    """Make ``home`` ready for this process: umask set, folder created if missing, and
    the home and its :data:`KBSYNC_PARTS` checked.

    Raises:
        HomeExposed: group or others can use something there, it is another user's, or
            it cannot be checked (one line naming the path and the fix).
    """
    access = use_umask(HomeAccess.of(shared_group))
    home = Path(home)
    if not home.exists():
        make_dir(home, access)
    check_home(home, access)
    return access


def check_home(home: Path, access: HomeAccess) -> None:
    """Refuse a home group or others can use (see :func:`open_home`).

    Walks the parts on every open (a few hundred entries for a million-chunk store:
    milliseconds), so a chmod made since the last open is caught by the next one.
    """
    home = Path(home)
    _check_entry(home, _stat(home, home, follow=True), access, home)
    for part in KBSYNC_PARTS:
        _walk(home / part, access, home)


def _walk(path: Path, access: HomeAccess, home: Path) -> None:
    """Check ``path`` and, if a folder, everything below it (links are not followed)."""
    st = _stat(path, home, follow=False)
    if st is None:
        return
    if access.shared:
        st = _share_own(path, st, access)
    _check_entry(path, st, access, home)
    if not stat.S_ISDIR(st.st_mode):
        return
    try:
        names = sorted(os.listdir(path))
    except FileNotFoundError:  # removed by a writer while we looked: nothing left to check
        return
    except OSError as exc:
        if access.shared:
            raise HomeExposed(
                f"cannot check the permissions under {path}: {exc.strerror}; in a home shared "
                f"with group {access.group} (KBSYNC_SHARED_GROUP) every member must be able to "
                f"enter it: its owner, {_user(st.st_uid)}, runs any kbsync command with the "
                f"same KBSYNC_SHARED_GROUP once, or `chmod -R g+rwX {_arg(home)}`") from exc
        raise HomeExposed(f"cannot check the permissions under {path}: {exc.strerror}; "
                          f"kbsync opens only a home it can check (`ls -la {path}`)") from exc
    for name in names:
        _walk(path / name, access, home)


def _share_own(path: Path, st: os.stat_result, access: HomeAccess) -> os.stat_result:
    """In a shared home, give the shared group what this user's own entry gives its owner
    (folders also setgid), so every member can use it; another member's entry is theirs
    to fix. Heals what kbsync before issue 37 left (``run/`` 2700, the cache 0640).

    Only adds group bits to an entry already in the shared group: it never changes a
    group, nor takes away what others may do (the check refuses both, naming the fix)."""
    if stat.S_ISLNK(st.st_mode) or st.st_uid != os.geteuid() or st.st_gid != access.gid:
        return st
    mode = stat.S_IMODE(st.st_mode)
    wanted = mode | (mode & 0o700) >> 3
    if stat.S_ISDIR(st.st_mode):
        wanted |= stat.S_ISGID
    if wanted == mode:
        return st
    try:
        os.chmod(path, wanted, follow_symlinks=False)
        return os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return st
    except OSError as exc:  # not a member of the group: the check below names the fix
        log.debug("cannot share %s with group %s: %s", path, access.group, exc)
        return st


def _stat(path: Path, home: Path, *, follow: bool) -> os.stat_result | None:
    try:
        return os.stat(path, follow_symlinks=follow)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise HomeExposed(f"cannot check the permissions of {path}: {exc.strerror} "
                          f"(KBSYNC_HOME={home})") from exc


def _check_entry(path: Path, st: os.stat_result | None, access: HomeAccess, home: Path) -> None:
    """Raise :class:`HomeExposed` when ``path`` grants more than ``access`` allows."""
    if st is None or stat.S_ISLNK(st.st_mode):  # a link's own mode means nothing
        return
    mode = stat.S_IMODE(st.st_mode)
    if not access.shared and st.st_uid != os.geteuid():
        raise HomeExposed(
            f"{path} belongs to {_user(st.st_uid)}, not to {_user(os.geteuid())} who runs "
            f"kbsync: a kbsync home belongs to one user; run kbsync as its owner, or "
            f"`chown -R {_user(os.geteuid())} {_arg(home)}` (KBSYNC_SHARED_GROUP shares one on "
            "purpose)")
    bits = mode & access.forbidden_bits()
    if stat.S_ISSOCK(st.st_mode):
        bits &= 0o222  # only write access lets another user connect to a socket
    if bits:
        who = " and ".join(w for w, b in (("group", 0o070), ("others", 0o007)) if bits & b)
        raise HomeExposed(
            f"{path} is open to {who} (mode {mode:04o}): kbsync refuses a home other users "
            f"can read or write; run `{_fix(access)} {_arg(home)}`"
            + ("" if access.shared else " (or set KBSYNC_SHARED_GROUP to share it with "
               "one group on purpose)"))
    if access.shared and mode & 0o070 and st.st_gid != access.gid:
        raise HomeExposed(
            f"{path} is open to group {_group(st.st_gid)}, not the shared group "
            f"{access.group} (KBSYNC_SHARED_GROUP); run `chgrp -R {access.group} {_arg(home)}`")


def _arg(home: Path) -> str:
    """``home`` as one shell word for the ``chmod -R``/``chown -R``/``chgrp -R`` advice.

    The advice only ever names the home the user set (``KBSYNC_HOME``, never empty:
    kbsync.settings refuses that) or the default ``.kbsync``; quoting keeps a path with a
    space, or one starting with ``-``, from naming other folders or an option.
    """
    text = str(home)
    return shlex.quote(f"./{text}" if text.startswith("-") else text)


def _fix(access: HomeAccess) -> str:
    return "chmod -R o-rwx" if access.shared else "chmod -R go-rwx"


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return f"gid {gid}"


def reset() -> None:
    """Forget the access in effect (for tests; the umask is the caller's to restore)."""
    global _process_access
    with _state_lock:
        _process_access = None
