"""The kernel is the oracle: what discovery captures, decided by kbsync's rule, equals what
``runuser -u USER -- test -r`` says, for every user of a random tree (issue 39).

Real users and groups (``useradd``/``groupadd``), real modes and ACLs (``chmod``, ``chown``,
``setfacl``); skipped with the reason without root or those tools (tests/perms/perm_users.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kbsync.ingest.discover import discover
from kbsync.models import RootSpec
from kbsync.perms.reader import Reader
from kbsync.perms.rule import UNREADABLE, Profile
from perm_users import (kernel_readable, local_people, open_folder, random_share, require_tools,
                        run)


def _rule_readable(root: Path, user: str) -> set[Path]:
    reader = Reader.of_name(user)
    decided: dict[str, bool] = {}
    found = discover(RootSpec(name="share", path=root.resolve()))
    return {f.path for f in found.files
            if Profile(f.access or "", f.access_grants).readable_by(reader, decided)}


@pytest.fixture
def share():
    require_tools()
    with local_people(5, 3, seed=39) as people, open_folder("kbsync-perms") as base:
        root = base / "share"
        files = random_share(root, people, seed=39)
        yield root, files, people


def test_every_users_view_equals_the_kernels_on_a_random_tree(share) -> None:
    root, files, people = share
    assert len(files) >= 200
    seen = set()
    for user in people.users:
        expected = kernel_readable(user, files)
        assert _rule_readable(root, user) == expected, user
        seen.add(len(expected))
    assert len(seen) > 1 and max(seen) > 0  # the tree gives the users different views


def test_the_views_follow_chmod_chown_setfacl_a_folder_and_group_membership(share) -> None:
    root, files, people = share
    run("chmod", "0644", str(files[0]))
    run("chown", people.users[1], str(files[1]))
    run("setfacl", "-m", f"u:{people.users[2]}:r--,m::r--", str(files[2]))
    run("setfacl", "-b", str(files[3]))
    run("chmod", "0700", str(files[4].parent))
    run("chmod", "0000", str(files[50]))
    run("gpasswd", "-d", people.users[0], _a_supplementary_group(people.users[0]) or "root")
    for user in people.users:
        assert _rule_readable(root, user) == kernel_readable(user, files), user


def _a_supplementary_group(user: str) -> str | None:
    primary = Reader.of_name(user)
    import grp
    import pwd

    gid = pwd.getpwnam(user).pw_gid
    extra = [g for g in primary.gids if g != gid]
    return grp.getgrgid(extra[0]).gr_name if extra else None


def test_an_owner_without_r_is_denied_though_other_may_read(share) -> None:
    root, files, people = share
    target = files[7]
    for folder in (target.parent, *target.parent.parents):
        if folder == Path("/"):
            break
        folder.chmod(folder.stat().st_mode | 0o011)
    run("chown", f"{people.users[0]}:{people.groups[0]}", str(target))
    run("setfacl", "-b", str(target))
    target.chmod(0o044)
    assert target not in kernel_readable(people.users[0], [target])
    assert target not in _rule_readable(root, people.users[0])
    stranger = [u for u in people.users[1:]
                if Reader.of_name(u).gids.isdisjoint({Reader.of_name(people.users[0]).gids
                                                      and _gid(people.groups[0])})]
    for user in stranger:
        assert (target in kernel_readable(user, [target])) == (target in _rule_readable(root, user))


def _gid(group: str) -> int:
    import grp

    return grp.getgrnam(group).gr_gid


def test_a_huge_acl_is_captured_and_decided_as_the_kernel_does(share) -> None:
    root, files, people = share
    target = files[9]
    for folder in (target.parent, *target.parent.parents):
        if folder == Path("/"):
            break
        folder.chmod(0o755)
    run("setfacl", "-b", str(target))
    target.chmod(0o600)
    # 300 named entries of uids and gids that exist nowhere, then the real users'.
    ghosts = ",".join(f"u:{70000 + i}:r--,g:{80000 + i}:r--" for i in range(150))
    real = ",".join(f"u:{u}:{'r--' if i % 2 else '---'}" for i, u in enumerate(people.users))
    run("setfacl", "-m", f"{ghosts},{real},m::r--", str(target))
    for user in people.users:
        assert (target in kernel_readable(user, [target])) == (target in _rule_readable(root, user))
    ghost = Reader.of_uid(70001)  # no passwd entry: reads what "other" may, nothing more
    assert not ghost.known
    found = {f.path: f for f in discover(RootSpec(name="share", path=root.resolve())).files}
    assert not Profile(found[target].access or "", found[target].access_grants).readable_by(ghost)


def test_an_acl_that_cannot_be_read_makes_the_document_root_only(share, monkeypatch) -> None:
    root, files, _people = share
    real = os.getxattr

    def refuse(path, name, *args, **kwargs):
        if str(path) == str(files[11]):
            raise PermissionError(1, "Operation not permitted")
        return real(path, name, *args, **kwargs)

    monkeypatch.setattr(os, "getxattr", refuse)
    found = discover(RootSpec(name="share", path=root.resolve()))
    by_path = {f.path: f for f in found.files}
    assert by_path[files[11]].access == UNREADABLE.id
    assert [doc for doc, _why in found.unreadable_access] == [
        f"share/{files[11].relative_to(root).as_posix()}"]
    assert not UNREADABLE.readable_by(Reader.of_process())  # only root, who is never filtered
