"""Walk roots safely and name every file with a stable ``doc_id``.

``doc_id = <root name>/<relative POSIX path>``. The walk:
- skips hidden directories and files (names starting with ``.``);
- never follows a symlink whose target resolves outside the root, and visits
  each real directory once (symlink loops end);
- reports unreadable directories (also those it may list but not enter) instead of
  failing the walk: their documents are kept, never deleted (:mod:`kbsync.ingest.plan`);
- keeps names that are not valid UTF-8 readable and stable by writing their
  undecodable bytes as ``\\xNN`` escapes in the doc_id.
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

from kbsync.convert.safe_read import open_within
from kbsync.errors import ErrorCode, UsageError
from kbsync.models import Failure, RootSpec, SourceFile, display_path, display_text

log = logging.getLogger(__name__)

HASH_BLOCK = 1 << 20
# Skipped entries logged one by one per root and kind; past this, one line gives the rest
# (a share whose files were all swapped for links once logged a line per file).
LOGGED_PER_KIND = 5


@dataclass
class Discovery:
    """Files found under one root, plus what was skipped and why."""

    root: RootSpec
    files: list[SourceFile] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # unsupported types (relative paths)
    problems: list[Failure] = field(default_factory=list)  # unreadable dirs, escaping links
    quiet: bool = False  # problems recorded, not logged (a walk that is done again next)
    problem_counts: dict[str, int] = field(default_factory=dict)  # per error kind


def parse_root(spec: str) -> RootSpec:
    """Parse ``PATH`` or ``NAME=PATH`` into a checked :class:`RootSpec`.

    Raises:
        UsageError: the path is empty (``NAME=``), does not exist, is not a
            directory, or is unreadable.
    """
    name, sep, raw_path = spec.partition("=")
    if not sep or not name or "/" in name:
        name, raw_path = "", spec
    if not raw_path.strip():  # Path("") is the working directory: never index it by accident
        shown = f"{name}=" if name else repr(spec)
        raise UsageError(f"root {shown} has an empty path: write NAME=PATH "
                         f"(e.g. {name or 'docs'}=./docs)")
    path = Path(raw_path).expanduser()
    if not path.exists():
        raise UsageError(f"root {raw_path!r} does not exist")
    if not path.is_dir():
        raise UsageError(f"root {raw_path!r} is not a directory")
    if not os.access(path, os.R_OK | os.X_OK):
        raise UsageError(f"root {raw_path!r} is not readable")
    resolved = path.resolve()
    return RootSpec(name=name or resolved.name or "root", path=resolved)


def _display(raw: str) -> str:
    """A name as valid UTF-8: undecodable bytes become ``\\xNN`` escapes (one helper
    for doc_ids, payloads and records: :func:`kbsync.models.display_path`)."""
    return display_path(raw)


_BYTE_ESCAPE = re.compile(r"\\x([89a-f][0-9a-f])")


def root_parameter(spec: str) -> str:
    """A root argument (``PATH`` or ``NAME=PATH``) as valid UTF-8, for Prefect parameters.

    The API refuses a string with the surrogates that stand for a non-UTF-8
    byte of a path; they travel as ``\\xNN`` escapes, and :func:`local_root`
    turns them back.
    """
    return display_path(spec)


def local_root(spec: str) -> str:
    """Inverse of :func:`root_parameter`: the root argument that names the real folder.

    ``spec`` is returned unchanged when it names an existing path as written (a
    literal backslash in a name wins) or holds no ``\\xNN`` escape of a byte
    0x80-0xFF; otherwise the escapes become the original bytes when that path
    exists. A spec that names nothing either way is returned unchanged, so
    :func:`parse_root` reports it as missing in its readable form.
    """
    if not _BYTE_ESCAPE.search(spec) or _names_path(spec):
        return spec
    raw = _BYTE_ESCAPE.sub(lambda m: chr(0xDC00 + int(m.group(1), 16)), spec)
    return raw if _names_path(raw) else spec


def _names_path(spec: str) -> bool:
    _name, sep, path = spec.partition("=")
    return (os.path.lexists(os.path.expanduser(spec))
            or bool(sep and os.path.lexists(os.path.expanduser(path))))


def _within(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def _matches(rel: str, patterns: Sequence[str]) -> bool:
    base = rel.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(rel, p) or fnmatch.fnmatchcase(base, p) for p in patterns)


def discover(
    root: RootSpec,
    *,
    accept: Callable[[Path], bool] = lambda _p: True,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    quiet: bool = False,
) -> Discovery:
    """List the files under ``root`` in a stable (sorted) order.

    Args:
        root: the root to walk.
        accept: files it rejects are listed in ``ignored`` (unsupported type).
        include: glob patterns; when given, only matching files are considered.
        exclude: glob patterns of files to leave out entirely.
        quiet: record problems without logging them (full mode's preflight walks each
            root once more right after: its problems are logged then, once).

    Returns:
        A :class:`Discovery`; ``files`` carry size and mtime, not yet a hash.
    """
    result = Discovery(root=root, quiet=quiet)
    visited: set[tuple[int, int]] = set()
    stack: list[tuple[Path, str]] = [(root.path, "")]
    while stack:
        directory, rel_dir = stack.pop()
        try:
            info = directory.stat()
        except OSError as exc:
            _problem(result, rel_dir, directory, ErrorCode.PermissionDenied, exc)
            continue
        if (info.st_dev, info.st_ino) in visited:
            continue  # symlink loop or second link to the same directory
        visited.add((info.st_dev, info.st_ino))
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as exc:
            _problem(result, rel_dir, directory, ErrorCode.PermissionDenied, exc)
            continue
        if entries and not _searchable(directory):
            # Mode 444, as SMB and NFS mounts show: names listed, none can be stat'ed or
            # opened. One problem for the folder, whose documents are then kept, not one
            # "Permission denied" per entry.
            _problem(result, rel_dir, directory, ErrorCode.PermissionDenied,
                     f"can be listed but not entered (no search/x permission): its "
                     f"{len(entries)} entries cannot be read")
            continue
        subdirs = []
        for entry in entries:
            item = _classify(entry, root, rel_dir, result)
            if item is None:
                continue
            kind, path, rel = item
            if kind == "dir":
                subdirs.append((path, rel))
            elif not include or _matches(rel, include):
                if exclude and _matches(rel, exclude):
                    continue
                _add_file(result, root, path, rel, accept)
        stack.extend(reversed(subdirs))
    result.files.sort(key=lambda f: f.doc_id)
    _drop_ambiguous(result)
    _log_unlogged(result)
    return result


def _log_unlogged(result: Discovery) -> None:
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


def _drop_ambiguous(result: Discovery) -> None:
    """Keep one file per doc_id: a name with an undecodable byte (``lat<0xE9>.md``) shows
    as the name spelled with a literal backslash (``lat\\xe9.md``). The file whose
    name is valid UTF-8 keeps the doc_id; the other is skipped and reported, since two
    files under one doc_id would overwrite each other on every run."""
    kept: list[SourceFile] = []
    for source in result.files:  # sorted by doc_id: equal ones are neighbours
        if kept and kept[-1].doc_id == source.doc_id:
            first, other = sorted((kept[-1], source), key=lambda f: f.display != str(f.path))
            kept[-1] = first
            _problem(result, other.rel_path, other.path, ErrorCode.AmbiguousName,
                     f"skipped: its name shows as {other.doc_id}, the doc_id of another "
                     "file (one spelled with a literal \\x); rename one of them")
            continue
        kept.append(source)
    result.files = kept


def _classify(entry: os.DirEntry, root: RootSpec, rel_dir: str, result: Discovery):
    """Decide what a directory entry is: ``("dir"|"file", path, rel)`` or ``None`` to skip."""
    if entry.name.startswith("."):
        return None
    path = Path(entry.path)
    rel = f"{rel_dir}/{_display(entry.name)}" if rel_dir else _display(entry.name)
    try:
        if entry.is_symlink():
            target = path.resolve()
            if not _within(target, root.path):
                _problem(result, rel, path, ErrorCode.SymlinkOutsideRoot,
                         f"symlink points outside the root to {target}")
                return None
        is_dir = entry.is_dir()  # follows symlinks, which are inside the root here
        is_file = entry.is_file()
    except (OSError, RuntimeError) as exc:  # RuntimeError: resolve() on a loop
        _problem(result, rel, path, ErrorCode.UnreadableEntry, exc)
        return None
    if is_dir:
        return "dir", path, rel
    if is_file:
        return "file", path, rel
    return None  # sockets, fifos, devices, dangling links


def _add_file(result: Discovery, root: RootSpec, path: Path, rel: str, accept) -> None:
    try:
        accepted = accept(path)  # reads the first bytes of a file without an extension
    except OSError as exc:
        _problem(result, rel, path, ErrorCode.PermissionDenied, exc)
        return
    if not accepted:
        result.ignored.append(rel)
        return
    try:
        info = path.stat()
    except OSError as exc:
        _problem(result, rel, path, ErrorCode.PermissionDenied, exc)
        return
    if not stat.S_ISREG(info.st_mode):
        return
    result.files.append(SourceFile(
        doc_id=f"{root.name}/{rel}", root=root.name, path=path, rel_path=rel,
        size=info.st_size, mtime_ns=info.st_mtime_ns, root_path=root.path,
    ))


def _problem(result: Discovery, rel: str, path: Path, error: ErrorCode, reason) -> None:
    doc_id = f"{result.root.name}/{rel}" if rel else result.root.name
    # The reason may name another raw path (a symlink's target): escape the whole line.
    message = display_text(f"{path}: {reason}")
    seen = result.problem_counts.get(str(error), 0)
    result.problem_counts[str(error)] = seen + 1
    if not result.quiet and seen < LOGGED_PER_KIND:
        log.warning("skipped %s: %s", doc_id, display_text(str(reason)))
    result.problems.append(Failure(doc_id=doc_id, path=_display(str(path)), error=error,
                                   message=message))


def hash_file(path: Path, within: Path | None = None) -> str:
    """sha256 of the file's bytes, streamed in 1 MiB blocks, from one descriptor that, with
    ``within``, is checked to lie inside it (:func:`kbsync.convert.safe_read.open_within`).

    Raises:
        OSError: the file cannot be opened or read.
        SymlinkOutsideRoot: the opened file lies outside ``within``.
    """
    digest = hashlib.sha256()
    with os.fdopen(open_within(path, within), "rb") as handle:
        while block := handle.read(HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def iter_batches(items: Sequence, size: int) -> Iterable[list]:
    """Consecutive slices of at most ``size`` items."""
    for start in range(0, len(items), size):
        yield list(items[start:start + size])
