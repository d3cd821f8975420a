"""The ACL attribute is parsed as ``getfacl`` reads it, and a bad one is never taken for no
ACL (issue 39)."""

from __future__ import annotations

import os
import random
import shutil
import subprocess

import pytest

from kbsync.perms.acl import (_GROUP, _GROUP_OBJ, _MASK, _OTHER, _USER, _USER_OBJ, ACL_XATTR,
                              READ, AclUnreadable, grant_of, parse_acl)

TAGS = {_USER_OBJ: "user", _USER: "user", _GROUP_OBJ: "group", _GROUP: "group", _MASK: "mask",
        _OTHER: "other"}


def _getfacl(path) -> set[tuple[str, str, str]]:
    out = subprocess.run(["getfacl", "-n", "-c", "-E", str(path)], capture_output=True,
                         text=True, check=True).stdout
    return {tuple(line.split("#")[0].strip().split(":")) for line in out.splitlines() if line}


def _parsed(path) -> set[tuple[str, str, str]]:
    entries = parse_acl(os.getxattr(path, ACL_XATTR))
    out = set()
    for tag, perm, ident in entries:
        qualifier = str(ident) if tag in (_USER, _GROUP) else ""
        rwx = "".join(c if perm & bit else "-" for c, bit in (("r", 4), ("w", 2), ("x", 1)))
        out.add((TAGS[tag], qualifier, rwx))
    return out


def test_random_acls_parse_as_getfacl_reads_them(tmp_path) -> None:
    if shutil.which("setfacl") is None or shutil.which("getfacl") is None:
        pytest.skip("setfacl/getfacl not found (Debian: acl)")
    rng = random.Random(39)
    for i in range(40):
        path = tmp_path / f"f{i}"
        path.write_text("x")
        perms = ["r--", "rw-", "--x", "---", "rwx", "r-x"]
        entries = [f"u:{60000 + rng.randrange(50)}:{rng.choice(perms)}" for _ in range(rng.randint(0, 4))]
        entries += [f"g:{61000 + rng.randrange(50)}:{rng.choice(perms)}" for _ in range(rng.randint(0, 4))]
        entries.append(f"m::{rng.choice(perms)}")
        subprocess.run(["setfacl", "-m", ",".join(entries), str(path)], check=True)
        assert _parsed(path) == _getfacl(path)


def test_a_damaged_attribute_is_unreadable_not_absent(tmp_path) -> None:
    with pytest.raises(AclUnreadable):
        parse_acl(b"\x03\x00\x00\x00" + b"\x00" * 8)  # version 3
    with pytest.raises(AclUnreadable):
        parse_acl(b"\x02\x00\x00\x00" + b"\x00" * 5)  # a torn entry
    path = tmp_path / "plain"
    path.write_text("x")
    path.chmod(0o640)
    grant = grant_of(path, path.stat(), READ)  # no ACL: the mode bits, exactly
    assert (grant.owner_ok, grant.groups, grant.other_ok) == (True, ((os.getgid(), True),), False)


def test_a_file_system_without_acls_is_decided_by_the_mode_bits(tmp_path, monkeypatch) -> None:
    import errno

    path = tmp_path / "nfs-like"
    path.write_text("x")
    path.chmod(0o604)

    def unsupported(*_args, **_kwargs):
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr(os, "getxattr", unsupported)
    grant = grant_of(path, path.stat(), READ)
    assert (grant.owner_ok, grant.groups[0][1], grant.other_ok) == (True, False, True)
