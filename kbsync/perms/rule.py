"""The kernel's read rule, and the profile a document is indexed under.

A :class:`Grant` is one object's answer for one permission bit, normalised from its mode
and access ACL (:mod:`kbsync.perms.acl`). :func:`grants` is the kernel's first-match rule
(``fs/posix_acl.c``, ``acl_permission_check``):

1. the owner gets the owner entry, whatever "other" says;
2. a named user gets its entry, capped by the mask;
3. a user in the owning group or a named group gets the bit when *any* of its matching
   group entries grants it (capped by the mask); when all of them lack it, it is denied,
   whatever "other" says;
4. anyone else gets "other".

One exception, also the kernel's: an object whose mode has no group bits (an ACL mask of
``---``) is decided by its mode bits alone, its named entries ignored
(:func:`kbsync.perms.acl.grant_of`).

Root reads everything (it is never filtered: :mod:`kbsync.catalog.access`). A
:class:`~kbsync.perms.reader.Reader` without a passwd entry gets "other" and nothing more.

A document's :class:`Profile` is its file's ``r`` grant and the ``x`` grant of every
folder above it, the root's ancestors up to ``/`` included: a reader may read the
document exactly when every one of them grants. Its id (:attr:`Profile.id`) names the
file's grant and the folder the file is in, not the folders' grants: documents of one folder
with the same permissions share one profile; a change of a file's own permissions is a
change of its id (its points are given the new one), while a change of a folder's is a
change of the grants its profiles record, with no point written
(:func:`kbsync.catalog.access.record_profiles`): ``chmod 700`` of a folder of 10,000
documents rewrites a few profile records, not 30,000 points.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from kbsync.perms.reader import Reader


@dataclass(frozen=True, slots=True)
class Grant:
    """Who gets one permission bit on one object.

    Attributes:
        owner: the owner's uid; ``owner_ok`` whether the owner entry grants.
        users: ``(uid, grants)`` of each named user, the mask applied, sorted.
        groups: ``(gid, grants)`` of the owning group and each named group (one gid named
            twice grants when either entry does), the mask applied, sorted.
        other_ok: whether "other" grants.
    """

    owner: int
    owner_ok: bool
    users: tuple[tuple[int, bool], ...]
    groups: tuple[tuple[int, bool], ...]
    other_ok: bool

    def key(self) -> str:
        """The canonical text of this grant: ``owner:ok|uid:ok,...|gid:ok,...|other``
        (what profiles store and hash; :meth:`parse` reads it back)."""
        users = ",".join(f"{u}:{int(ok)}" for u, ok in self.users)
        groups = ",".join(f"{g}:{int(ok)}" for g, ok in self.groups)
        return f"{self.owner}:{int(self.owner_ok)}|{users}|{groups}|{int(self.other_ok)}"

    @classmethod
    def parse(cls, key: str) -> "Grant":
        """Inverse of :meth:`key`.

        Raises:
            ValueError: not a grant's key.
        """
        owner, users, groups, other = key.split("|")
        uid, ok = owner.split(":")
        return cls(owner=int(uid), owner_ok=ok == "1", users=_pairs(users),
                   groups=_pairs(groups), other_ok=other == "1")

    def grants(self, reader: "Reader") -> bool:
        """Whether ``reader`` gets the bit (module doc, steps 1-4)."""
        if not reader.known:
            return self.other_ok
        if reader.uid == self.owner:
            return self.owner_ok
        for uid, ok in self.users:
            if uid == reader.uid:
                return ok
        matched = [ok for gid, ok in self.groups if gid in reader.gids]
        if matched:
            return any(matched)
        return self.other_ok

    def others_may(self) -> bool:
        """Whether anyone but the owner (and root) may get the bit."""
        return self.other_ok or any(ok for _u, ok in self.users) or any(ok for _g, ok in self.groups)


def _pairs(text: str) -> tuple[tuple[int, bool], ...]:
    if not text:
        return ()
    return tuple((int(ident), ok == "1") for ident, ok in (p.split(":") for p in text.split(",")))


@dataclass(frozen=True, slots=True)
class Profile:
    """A document's permissions: the keys of its file's ``r`` grant, then the ``x`` grant of
    each folder from its own up to ``/``. ``id`` is their hash (:func:`profile_id`)."""

    id: str
    grants: tuple[str, ...]

    @classmethod
    def of(cls, file_grant: str, folder_grants: Iterable[str], folder: str = "") -> "Profile":
        """The profile of a file in ``folder`` (its path as walked; ``""`` for a text that is
        no file) whose grant key is ``file_grant``, under folders (innermost first) whose
        ``x`` grant keys are ``folder_grants``. The id is the file grant's and the
        folder's (module doc)."""
        grants = (file_grant, *folder_grants)
        return cls(id=profile_id((file_grant, f"in:{folder}")), grants=grants)

    def readable_by(self, reader: "Reader", decided: dict[str, bool] | None = None) -> bool:
        """Whether ``reader`` may read the document; ``decided`` caches each grant's answer
        for this reader across profiles (folders are shared by many)."""
        if not self.grants:
            return False  # UNREADABLE: root only
        for key in self.grants:
            answer = None if decided is None else decided.get(key)
            if answer is None:
                answer = Grant.parse(key).grants(reader)
                if decided is not None:
                    decided[key] = answer
            if not answer:
                return False
        return True

    def owner_only(self) -> bool:
        """Whether nobody but the file's owner (and root) may read the document: its file
        grants nobody else ``r``, or a folder above it grants ``x`` to its own owner alone
        and that owner is the file's (``chmod 700`` of a folder of one's own files)."""
        if not self.grants:
            return True
        file_grant = Grant.parse(self.grants[0])
        if not file_grant.others_may():
            return True
        return any(not g.others_may() and g.owner == file_grant.owner
                   for g in map(Grant.parse, self.grants[1:]))


def profile_id(parts: Iterable[str]) -> str:
    """A profile's id: 32 hex digits of the sha256 of ``parts`` (:meth:`Profile.of`: the
    file's grant key and its folder). A folder's path may be any text: UTF-8, with the
    bytes a path may hold escaped."""
    text = "\n".join(parts)
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:32]


UNREADABLE = Profile(id="unreadable", grants=())
"""The profile of a document whose permissions could not be read: nobody but root."""


def owner_only_profile(uid: int) -> Profile:
    """The profile of a text that is no file (:func:`kbsync.api.add_text`): its writer's
    only (the store's owner, and root)."""
    return Profile.of(Grant(owner=uid, owner_ok=True, users=(), groups=(), other_ok=False).key(),
                      ())
