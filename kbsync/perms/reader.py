"""Who is asking: a uid and its groups, resolved when the question is asked.

Groups come from NSS at query time (``os.getgrouplist``), so a change of membership
applies to the next search, with no run. A uid with no passwd entry has no groups and is
not *known*: it reads what "other" may read, and nothing more (:mod:`kbsync.perms.rule`).
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass

from kbsync.errors import UsageError


@dataclass(frozen=True)
class Reader:
    """A reader's identity: ``uid``, ``gids`` (primary and supplementary), ``name``;
    ``known`` is false for a uid without a passwd entry."""

    uid: int
    gids: frozenset[int]
    name: str
    known: bool = True

    @property
    def is_root(self) -> bool:
        """Root reads everything: it is never filtered."""
        return self.known and self.uid == 0

    @classmethod
    def of_process(cls) -> "Reader":
        """This process: its effective uid and groups, as the kernel checks them."""
        uid = os.geteuid()
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            name = str(uid)
        return cls(uid=uid, gids=frozenset({os.getegid(), *os.getgroups()}), name=name)

    @classmethod
    def of_name(cls, name: str) -> "Reader":
        """The user ``name`` (or a numeric uid) with its groups from NSS now.

        Raises:
            UsageError: no such user name.
        """
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            if not name.isdigit():
                raise UsageError(f"--as-user {name!r}: no such user") from None
            return cls.of_uid(int(name))
        return cls(uid=entry.pw_uid, gids=frozenset(os.getgrouplist(entry.pw_name, entry.pw_gid)),
                   name=entry.pw_name)

    @classmethod
    def of_uid(cls, uid: int) -> "Reader":
        """The user ``uid``; without a passwd entry, an unknown reader ("other" only)."""
        try:
            entry = pwd.getpwuid(uid)
        except KeyError:
            return cls(uid=uid, gids=frozenset(), name=str(uid), known=False)
        return cls(uid=uid, gids=frozenset(os.getgrouplist(entry.pw_name, entry.pw_gid)),
                   name=entry.pw_name)
