"""The walk under a root: its files in doc_id order, resumable after any doc_id.

The walk visits each directory's entries in the order of their *keys* (the entry's
relative path, plus ``/`` for a directory) and descends into a directory where its key
falls. That order is the order of the doc_ids themselves (a directory's key is a prefix
of all its files' doc_ids, and no name holds ``/``), so the files come out sorted with no
list to sort, and a walk can stop after any file and resume after it
(:class:`WalkCursor`): the resumed walk lists again only the directories on the way to
the cursor, and skips every entry whose files all sort at or before it. The plan of a
large root streams through here in slices (:mod:`kbsync.ingest.plan`).

The rules (:mod:`kbsync.ingest.discover` states them for users):
- hidden entries (names starting with ``.``) are skipped;
- a symlink leading outside the root is never followed (a problem), and each real
  directory is entered once (``visited``, carried by the cursor, so a resumed walk
  skips the same second links a whole walk would);
- an unreadable directory is a problem, not an error: its documents are kept.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

import fnmatch

from kbsync.errors import ErrorCode
from kbsync.models import Failure, RootSpec, SourceFile, display_path, display_text
from kbsync.perms.acl import EXECUTE, READ, AclUnreadable, grant_key
from kbsync.perms.rule import UNREADABLE, Profile

log = logging.getLogger(__name__)

# Skipped entries logged one by one per root and kind; past this, one line gives the rest
# (a share whose files were all swapped for links once logged a line per file).
LOGGED_PER_KIND = 5


@dataclass
class Discovery:
    """Files found under one root (or one slice of it), plus what was skipped and why."""

    root: RootSpec
    files: list[SourceFile] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # unsupported types (relative paths)
    problems: list[Failure] = field(default_factory=list)  # unreadable dirs, escaping links
    quiet: bool = False  # problems recorded, not logged (a walk that is done again next)
    problem_counts: dict[str, int] = field(default_factory=dict)  # per error kind, whole root
    # doc_ids whose permissions could not be read (visible to root only), with the reason
    unreadable_access: list[tuple[str, str]] = field(default_factory=list)
    # one Profile per (file grant key, folder): files share its id and grants, not copies
    profiles: dict[tuple[str, str], Profile] = field(default_factory=dict)


@dataclass
class WalkCursor:
    """Where a resumed walk starts: after the file ``after`` (a relative path), with the
    directories already entered (``(st_dev, st_ino)``) and the problems already counted
    per kind (so a root logs :data:`LOGGED_PER_KIND` of each, not that many per slice).
    One entry per directory, none per file."""

    after: str
    visited: set[tuple[int, int]] = field(default_factory=set)
    problem_counts: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class WalkRules:
    """What the walk keeps: ``accept`` (files it rejects go to ``ignored``), and the
    ``include`` / ``exclude`` glob patterns."""

    accept: Callable[[Path], bool] = lambda _p: True
    include: Sequence[str] = ()
    exclude: Sequence[str] = ()


def iter_files(result: Discovery, rules: WalkRules, *, after: str | None = None,
               visited: set[tuple[int, int]] | None = None) -> Iterator[SourceFile]:
    """The files under ``result.root`` in doc_id order, only those after ``after``.

    Problems and ignored files of the part walked go to ``result`` as they are met.
    ``visited`` is updated in place (give the cursor's to resume). Lazy: a caller that
    stops early has walked only as far as the last file it took (and one entry more).
    """
    root = result.root
    visited = set() if visited is None else visited
    # Each listing with the x grants of its folder and every folder above it (to "/"):
    # what a reader must pass to reach its files. None: one could not be read.
    # (and the folder's path relative to the root: profiles are per folder, rule.Profile;
    # and the folder itself, whose entries' paths are made from it without parsing)
    stack = [(_listing(result, root.path, "", visited, after), _root_chain(root.path), "",
              root.path)]
    while stack:
        item = next(stack[-1][0], None)
        if item is None:
            stack.pop()
            continue
        kind, entry, rel = item
        _, chain, folder_rel, folder = stack[-1]
        path = _child(folder, entry.name)
        if kind == "dir":
            stack.append((_listing(result, path, rel, visited, after),
                          None if chain is None else _folder_chain(path, chain), rel, path))
            continue
        if filtered_out(rel, rules):
            continue
        source = _file(result, entry, path, rel, rules.accept, chain, folder_rel)
        if source is not None:
            yield source


def _child(folder: Path, name: str) -> Path:
    """``folder / name``, ``name`` being one entry's name, without parsing it again: the
    walk makes one of these a file (100,000 ``Path(str)`` cost a no-op sync of that many
    files about a second). ``_make_child_relpath`` is pathlib's own shortcut for walking
    (private: where a Python lacks it, the plain join)."""
    make = getattr(folder, "_make_child_relpath", None)
    return make(name) if make is not None else folder / name


def _root_chain(root: Path) -> tuple[str, ...] | None:
    """The x grants of ``root`` and each of its ancestors up to ``/``, innermost first."""
    chain: tuple[str, ...] | None = ()
    for folder in reversed((root, *root.parents)):
        chain = _folder_chain(folder, chain or ())
        if chain is None:
            return None
    return chain


def _folder_chain(folder: Path, above: tuple[str, ...]) -> tuple[str, ...] | None:
    """``above`` with ``folder``'s own x grant in front, or None when it cannot be read
    (its documents are then visible to root only)."""
    try:
        return (grant_key(folder, folder.stat(), EXECUTE), *above)
    except (OSError, AclUnreadable) as exc:
        log.debug("permissions of folder %s unreadable: %s", display_path(folder), exc)
        return None


def _listing(result: Discovery, directory: Path, rel_dir: str, visited: set[tuple[int, int]],
             after: str | None) -> Iterator[tuple[str, os.DirEntry, str]]:
    """A directory's entries to walk, in key order, as ``(kind, entry, rel)``; entries whose
    files all sort at or before ``after`` are left out unread."""
    on_path = after is not None and (not rel_dir or after.startswith(rel_dir + "/"))
    entries = _entries(result, directory, rel_dir, visited, resumed=on_path)
    keyed = []
    for entry in entries:
        if entry.name.startswith("."):
            continue
        rel = f"{rel_dir}/{display_path(entry.name)}" if rel_dir else display_path(entry.name)
        is_dir = _looks_like_dir(entry)
        key = rel + "/" if is_dir else rel
        if after is not None and key <= after and not (is_dir and after.startswith(key)):
            continue  # walked in an earlier slice (a directory not on the way: all of it)
        keyed.append((key, entry, rel))
    keyed.sort(key=lambda k: k[0])
    return _classified(result, _one_folder_per_key(result, keyed))


def _one_folder_per_key(result: Discovery, keyed: list) -> list:
    """``keyed`` with one folder per key: two folders whose names show alike (one with an
    undecodable byte, one spelled with a literal ``\\x``) would interleave their files
    under one set of doc_ids. The folder whose name is valid UTF-8 is kept; the other is
    skipped and reported (files with one doc_id are left to the caller: they are
    neighbours)."""
    kept: list = []
    for item in keyed:
        key, entry, rel = item
        if kept and key.endswith("/") and kept[-1][0] == key:
            first, other = sorted((kept[-1], item), key=lambda k: display_path(k[1].name)
                                  != k[1].name)
            kept[-1] = first
            problem(result, other[2], Path(other[1].path), ErrorCode.AmbiguousName,
                    f"skipped: its name shows as {result.root.name}/{rel}, the doc_id of "
                    "another folder (one spelled with a literal \\x); rename one of them")
            continue
        kept.append(item)
    return kept


def _classified(result: Discovery, keyed: list) -> Iterator[tuple[str, os.DirEntry, str]]:
    """The keyed entries classified one at a time, as the walk reaches each."""
    for _key, entry, rel in keyed:
        item = _classify(entry, result, rel)
        if item is not None:
            yield item


def _entries(result: Discovery, directory: Path, rel_dir: str, visited: set[tuple[int, int]], *,
             resumed: bool) -> list[os.DirEntry]:
    """The entries of ``directory``, or ``[]`` (a problem recorded) when it cannot be
    listed or entered, or was entered before (a symlink loop or a second link to it).
    ``resumed``: the directory holds the cursor, entered by an earlier slice: entered again."""
    try:
        info = directory.stat()
    except OSError as exc:
        problem(result, rel_dir, directory, ErrorCode.PermissionDenied, exc)
        return []
    if (info.st_dev, info.st_ino) in visited and not resumed:
        return []
    visited.add((info.st_dev, info.st_ino))
    try:
        with os.scandir(directory) as scan:
            entries = list(scan)
    except OSError as exc:
        problem(result, rel_dir, directory, ErrorCode.PermissionDenied, exc)
        return []
    if entries and not _searchable(directory):
        # Mode 444, as SMB and NFS mounts show: names listed, none can be stat'ed or
        # opened. One problem for the folder, whose documents are then kept, not one
        # "Permission denied" per entry.
        problem(result, rel_dir, directory, ErrorCode.PermissionDenied,
                f"can be listed but not entered (no search/x permission): its "
                f"{len(entries)} entries cannot be read")
        return []
    return entries


def _looks_like_dir(entry: os.DirEntry) -> bool:
    """Whether ``entry`` sorts as a directory (follows links; an error sorts as a file and
    is reported when classified)."""
    try:
        return entry.is_dir()
    except OSError:
        return False


def _classify(entry: os.DirEntry, result: Discovery, rel: str
              ) -> tuple[str, os.DirEntry, str] | None:
    """``("dir"|"file", entry, rel)`` for an entry to walk, or ``None`` to skip it."""
    try:
        if entry.is_symlink():
            target = Path(entry.path).resolve()
            if not _within(target, result.root.path):
                problem(result, rel, Path(entry.path), ErrorCode.SymlinkOutsideRoot,
                        f"symlink points outside the root to {target}")
                return None
        is_dir = entry.is_dir()  # follows symlinks, which are inside the root here
        is_file = entry.is_file()
    except (OSError, RuntimeError) as exc:  # RuntimeError: resolve() on a loop
        problem(result, rel, Path(entry.path), ErrorCode.UnreadableEntry, exc)
        return None
    if is_dir:
        return "dir", entry, rel
    if is_file:
        return "file", entry, rel
    return None  # sockets, fifos, devices, dangling links


def _file(result: Discovery, entry: os.DirEntry, path: Path, rel: str, accept,
          chain: tuple[str, ...] | None, folder: str) -> SourceFile | None:
    """The file ``entry`` (at ``path``) with its size, mtime and permission profile (its
    ``r`` grant under ``chain``, the folders' ``x`` grants), or ``None`` (ignored, or a
    problem). Its stat is the entry's (links followed, as ``Path.stat``), its ACL read by
    the entry's path string."""
    try:
        accepted = accept(path)  # reads the first bytes of a file without an extension
    except OSError as exc:
        problem(result, rel, path, ErrorCode.PermissionDenied, exc)
        return None
    if not accepted:
        result.ignored.append(rel)
        return None
    try:
        info = entry.stat()
    except OSError as exc:
        problem(result, rel, path, ErrorCode.PermissionDenied, exc)
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    root = result.root
    profile = _profile(result, entry.path, info, chain, folder, f"{root.name}/{rel}")
    return SourceFile(doc_id=f"{root.name}/{rel}", root=root.name, path=path, rel_path=rel,
                      size=info.st_size, mtime_ns=info.st_mtime_ns, root_path=root.path,
                      access=profile.id, access_grants=profile.grants)


def _profile(result: Discovery, path: str, info: os.stat_result,
             chain: tuple[str, ...] | None, folder: str, doc_id: str) -> Profile:
    """The file's profile (one per file grant in ``folder``, relative to the root: the
    walk's own string, so a profile costs no string per file); :data:`UNREADABLE` (root
    only: fail closed) when its ACL or a folder's above it could not be read, noted in
    ``result.unreadable_access``."""
    if chain is None:
        result.unreadable_access.append((doc_id, "a folder above it has permissions that "
                                                 "cannot be read"))
        return UNREADABLE
    try:
        key = (grant_key(path, info, READ), folder)
    except (OSError, AclUnreadable) as exc:
        result.unreadable_access.append((doc_id, display_text(str(exc))))
        return UNREADABLE
    profile = result.profiles.get(key)
    if profile is None:
        where = f"{result.root.path}/{folder}" if folder else str(result.root.path)
        profile = result.profiles[key] = Profile.of(key[0], chain, where)
    return profile


def problem(result: Discovery, rel: str, path: Path, error: ErrorCode, reason) -> None:
    """Record (and, up to :data:`LOGGED_PER_KIND` per kind, log) an entry skipped."""
    doc_id = f"{result.root.name}/{rel}" if rel else result.root.name
    # The reason may name another raw path (a symlink's target): escape the whole line.
    message = display_text(f"{path}: {reason}")
    seen = result.problem_counts.get(str(error), 0)
    result.problem_counts[str(error)] = seen + 1
    if not result.quiet and seen < LOGGED_PER_KIND:
        log.warning("skipped %s: %s", doc_id, display_text(str(reason)))
    result.problems.append(Failure(doc_id=doc_id, path=display_path(str(path)), error=error,
                                   message=message))


def log_unlogged(result: Discovery) -> None:
    """One line per kind of problem past :data:`LOGGED_PER_KIND`: how many more were skipped
    (each is still in ``problems``, so in the JSON's warnings)."""
    if result.quiet:
        return
    for error, count in sorted(result.problem_counts.items()):
        more = count - LOGGED_PER_KIND
        if more > 0:
            log.warning("root %s: %d more entries skipped (%s); the JSON's warnings list them "
                        "all", result.root.name, more, error)


def _searchable(directory: Path) -> bool:
    """Whether this process may enter ``directory`` (its effective ids, ACLs, capabilities)."""
    effective = os.access in os.supports_effective_ids
    return os.access(directory, os.X_OK, effective_ids=effective)


def filtered_out(rel: str, rules: WalkRules) -> bool:
    """True when the ``include`` / ``exclude`` patterns of ``rules`` leave out the file at
    ``rel`` (relative to its root): the walk never yields it, whether it exists or not."""
    return bool((rules.include and not _matches(rel, rules.include))
                or (rules.exclude and _matches(rel, rules.exclude)))


def _matches(rel: str, patterns: Sequence[str]) -> bool:
    base = rel.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(rel, p) or fnmatch.fnmatchcase(base, p) for p in patterns)


def _within(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True
