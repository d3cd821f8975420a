"""Local users, groups and a share of random permissions, for the permission tests.

Everything here is real: users and groups made with ``groupadd``/``useradd`` (removed
after), rights given with ``chmod``, ``chown`` and ``setfacl``, and the kernel asked who may
read what (:func:`kernel_readable`: ``runuser -u USER -- test -r``, one shell per user).
Needs root and the Debian tools (``passwd``, ``acl``, ``util-linux``); :func:`require_tools`
skips with the reason otherwise.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

TOOLS = ("useradd", "groupadd", "userdel", "groupdel", "gpasswd", "setfacl", "runuser")
FILE_MODES = (0o644, 0o644, 0o640, 0o640, 0o600, 0o604, 0o400, 0o440, 0o044, 0o004, 0o040,
              0o000, 0o664, 0o460, 0o406)
"""File modes drawn (0o044: an owner without r, whom "other"'s r does not help)."""
DIR_MODES = (0o755, 0o755, 0o755, 0o751, 0o750, 0o711, 0o710, 0o701, 0o700, 0o705, 0o754,
             0o745, 0o775)
"""Folder modes drawn (0o754, 0o745: some classes may list but not enter)."""
PERMS = ("r--", "---", "r-x", "--x", "rw-")


def require_tools() -> None:
    """Skip unless this process may make users and set ACLs."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the test makes local users (useradd) and sets ACLs")
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not found (Debian: passwd, acl, util-linux)")


def run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


@dataclass
class People:
    users: list[str]
    groups: list[str]


@contextmanager
def local_people(users: int, groups: int, *, seed: int) -> Iterator[People]:
    """``users`` users and ``groups`` groups with names unique to this process, each user
    in 0-2 random groups besides its own primary one; all removed on exit."""
    rng = random.Random(seed)
    tag = f"kb{os.getpid() % 100000}"
    people = People(users=[f"{tag}u{i}" for i in range(users)],
                    groups=[f"{tag}g{i}" for i in range(groups)])
    made_users: list[str] = []
    made_groups: list[str] = []
    try:
        for group in people.groups:
            run("groupadd", group)
            made_groups.append(group)
        for user in people.users:
            primary = rng.choice(people.groups)
            others = [g for g in people.groups if g != primary]
            extra = rng.sample(others, rng.randint(0, min(2, len(others))))
            run("useradd", "-M", "-N", "-s", "/usr/sbin/nologin", "-g", primary,
                *(["-G", ",".join(extra)] if extra else []), user)
            made_users.append(user)
        yield people
    finally:
        for user in made_users:
            subprocess.run(["userdel", user], capture_output=True)
        for group in made_groups:
            subprocess.run(["groupdel", group], capture_output=True)


@contextmanager
def open_folder(prefix: str) -> Iterator[Path]:
    """A fresh folder under /tmp that every user may traverse (pytest's own tmp_path is
    root's 0700, which would hide everything under it from everyone)."""
    base = Path(f"/tmp/{prefix}-{os.getpid()}")
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(mode=0o755)
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def random_share(root: Path, people: People, *, seed: int, tops: int = 3, per_folder: int = 10,
                 acl_share: float = 0.3) -> list[Path]:
    """A tree of ``tops`` x 4 x 2 leaf folders of ``per_folder`` files each, every file and
    folder given a random owner, group and mode, a share of them named-user and named-group
    ACL entries with a mask. Returns the files."""
    rng = random.Random(seed)
    owners = [*people.users, "root"]
    files: list[Path] = []
    folders: list[Path] = []
    # The root itself everyone may enter, whatever this process's umask: the tree below is
    # what is random. (Made by mkdir, it followed the umask, and a worker whose umask an
    # earlier test had left at 077 made a root no user could enter: every view empty.)
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    for top in range(tops):
        for mid in range(4):
            for leaf in range(2):
                folder = root / f"t{top}" / f"m{mid}" / f"l{leaf}"
                folder.mkdir(parents=True, exist_ok=True)
                for i in range(per_folder):
                    path = folder / f"f{i}.md"
                    path.write_text(f"# Note {len(files)}\n\nvolcano field notes number "
                                    f"{len(files)}.\n", encoding="utf-8")
                    files.append(path)
    folders = sorted({p for f in files for p in f.relative_to(root).parents if str(p) != "."})
    for rel in folders:
        _randomise(root / rel, rng, owners, people, DIR_MODES, acl_share, folder=True)
    for path in files:
        _randomise(path, rng, owners, people, FILE_MODES, acl_share, folder=False)
    return files


def _randomise(path: Path, rng: random.Random, owners: list[str], people: People,
               modes: tuple[int, ...], acl_share: float, *, folder: bool) -> None:
    shutil.chown(path, rng.choice(owners), rng.choice(people.groups))
    path.chmod(rng.choice(modes))
    if rng.random() < acl_share:
        users = rng.sample(people.users, rng.randint(0, min(2, len(people.users))))
        groups = rng.sample(people.groups, rng.randint(0, min(2, len(people.groups))))
        entries = [f"u:{u}:{rng.choice(PERMS)}" for u in users]
        entries += [f"g:{g}:{rng.choice(PERMS)}" for g in groups]
        mask = rng.choice(("r-x", "r--", "--x", "rwx", "---"))
        run("setfacl", "-m", ",".join([*entries, f"m::{mask}"]), str(path))


def kernel_readable(user: str, files: list[Path]) -> set[Path]:
    """The files the kernel lets ``user`` read (``test -r`` as that user, one shell)."""
    listing = "".join(f"{f}\n" for f in files)
    done = subprocess.run(
        ["runuser", "-u", user, "--", "sh", "-c",
         'while IFS= read -r f; do if [ -r "$f" ]; then printf "%s\\n" "$f"; fi; done'],
        input=listing, capture_output=True, text=True, check=True)
    return {Path(line) for line in done.stdout.splitlines()}
