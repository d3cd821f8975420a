"""Read a file's or folder's mode bits and POSIX access ACL into a :class:`Grant`.

The ACL is the ``system.posix_acl_access`` extended attribute, read with one
``getxattr`` (no content is read, and the kernel lets anyone who may look the path up
read it). Its layout is the kernel's stable ABI (``include/uapi/linux/posix_acl_xattr.h``):
a little-endian ``u32`` version (2), then 8-byte entries ``(u16 tag, u16 perm, u32 id)``.
It is parsed here rather than through ``pylibacl``: that package ships only a source
archive, which needs a C compiler and ``libacl1-dev`` at install time (kbsync's install
must work on a fresh machine), and one ``getxattr`` per file is all it would do (the
tests check every decision against the kernel). Limits: default ACLs only shape new files and
are not read; NFSv4 and SMB ACLs are not POSIX ACLs (a CIFS mount shows its mapped mode).
"""

from __future__ import annotations

import errno
import os
import stat
import struct

from kbsync.perms.rule import Grant

ACL_XATTR = "system.posix_acl_access"
READ, EXECUTE = 4, 1
"""The permission bits a document needs: ``r`` on the file, ``x`` on every folder above."""

_VERSION = 2
_USER_OBJ, _USER, _GROUP_OBJ, _GROUP, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
_ENTRY = struct.Struct("<HHI")
_NO_ACL = {errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP}
"""No ACL on the file, or none possible on its file system: the mode bits are exact."""


class AclUnreadable(Exception):
    """The ACL could not be read or parsed (EPERM, EACCES, a damaged attribute): the
    document is then visible to root only (:data:`kbsync.perms.rule.UNREADABLE`)."""


def grant_of(path: str | os.PathLike, info: os.stat_result, bit: int) -> Grant:
    """Who gets ``bit`` (:data:`READ` or :data:`EXECUTE`) on the object at ``path`` whose
    ``stat`` is ``info`` (symlinks followed, as an open would).

    Raises:
        AclUnreadable: the ACL exists but cannot be read or parsed.
    """
    try:
        raw = os.getxattr(path, ACL_XATTR)
    except OSError as exc:
        if exc.errno in _NO_ACL:
            return grant_of_mode(info, bit)
        raise AclUnreadable(f"cannot read its ACL: {exc.strerror or exc}") from exc
    if not stat.S_IMODE(info.st_mode) & stat.S_IRWXG:
        # The kernel consults an ACL only when the mode's group bits (the mask) are not all
        # clear (fs/namei.c, acl_permission_check): with a mask of ---, named entries count
        # for nothing and a named user falls back to "other".
        return grant_of_mode(info, bit)
    return grant_of_acl(parse_acl(raw), info, bit)


def grant_key(path: str | os.PathLike, info: os.stat_result, bit: int) -> str:
    """``grant_of(path, info, bit).key()``, the key of a file without an ACL remembered per
    owner, group and mode (most files of a share share a few: the walk then costs one
    ``getxattr`` per file and no key to build).

    Raises:
        AclUnreadable: as :func:`grant_of`.
    """
    try:
        os.getxattr(path, ACL_XATTR)
    except OSError as exc:
        if exc.errno in _NO_ACL:
            memo = (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode), bit)
            key = _MODE_KEYS.get(memo)
            if key is None:
                if len(_MODE_KEYS) >= _MODE_KEYS_KEPT:
                    _MODE_KEYS.clear()
                key = _MODE_KEYS[memo] = grant_of_mode(info, bit).key()
            return key
    return grant_of(path, info, bit).key()  # an ACL (read again: rare), or the error


_MODE_KEYS: dict[tuple[int, int, int, int], str] = {}
_MODE_KEYS_KEPT = 4096  # distinct (uid, gid, mode, bit) remembered before starting over


def grant_of_mode(info: os.stat_result, bit: int) -> Grant:
    """The grant of plain mode bits (no extended ACL)."""
    mode = stat.S_IMODE(info.st_mode)
    return Grant(owner=info.st_uid, owner_ok=bool(mode & (bit << 6)), users=(),
                 groups=((info.st_gid, bool(mode & (bit << 3))),), other_ok=bool(mode & bit))


def parse_acl(raw: bytes) -> list[tuple[int, int, int]]:
    """The ``(tag, perm, id)`` entries of an ACL attribute.

    Raises:
        AclUnreadable: not version 2, or not a whole number of entries.
    """
    if len(raw) < 4 or (len(raw) - 4) % _ENTRY.size or struct.unpack_from("<I", raw)[0] != _VERSION:
        raise AclUnreadable(f"its ACL attribute is not a version-{_VERSION} POSIX ACL "
                            f"({len(raw)} bytes)")
    return [_ENTRY.unpack_from(raw, offset) for offset in range(4, len(raw), _ENTRY.size)]


def grant_of_acl(entries: list[tuple[int, int, int]], info: os.stat_result, bit: int) -> Grant:
    """The grant of an access ACL: the mask caps named users and every group entry (the
    owning group's included), never the owner or other."""
    masks = [perm for tag, perm, _id in entries if tag == _MASK]
    capped = not masks or bool(masks[0] & bit)
    owner_ok = other_ok = False
    users: dict[int, bool] = {}
    groups: dict[int, bool] = {}
    for tag, perm, ident in entries:
        ok = bool(perm & bit)
        if tag == _USER_OBJ:
            owner_ok = ok
        elif tag == _USER:
            users[ident] = ok and capped
        elif tag in (_GROUP_OBJ, _GROUP):
            gid = info.st_gid if tag == _GROUP_OBJ else ident
            # A user in several matching groups passes when any of them grants (the kernel).
            groups[gid] = groups.get(gid, False) or (ok and capped)
        elif tag == _OTHER:
            other_ok = ok
    return Grant(owner=info.st_uid, owner_ok=owner_ok, users=tuple(sorted(users.items())),
                 groups=tuple(sorted(groups.items())), other_ok=other_ok)
