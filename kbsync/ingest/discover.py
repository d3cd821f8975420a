"""Walk roots safely and name every file with a stable ``doc_id``.

``doc_id = <root name>/<relative POSIX path>``. The walk:
- yields files in doc_id order, and can resume after any doc_id (:mod:`kbsync.ingest.walk`);
- skips hidden directories and files (names starting with ``.``);
- never follows a symlink whose target resolves outside the root, and visits
  each real directory once (symlink loops end);
- reports unreadable directories (also those it may list but not enter) instead of
  failing the walk: their documents are kept, never deleted (:mod:`kbsync.ingest.plan`);
- keeps names that are not valid UTF-8 readable and stable by writing their
  undecodable bytes as ``\\xNN`` escapes in the doc_id.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from pathlib import Path
from typing import Callable, Iterable, Sequence

from kbsync.convert.safe_read import open_within
from kbsync.errors import ErrorCode, UsageError
from kbsync.ingest.walk import (LOGGED_PER_KIND, Discovery, WalkRules, iter_files, log_unlogged,
                                problem)
from kbsync.models import RootSpec, SourceFile, display_path, root_name_problem

log = logging.getLogger(__name__)

HASH_BLOCK = 1 << 20

__all__ = ["Discovery", "LOGGED_PER_KIND", "discover", "drop_ambiguous", "hash_file",
           "iter_batches", "local_root", "parse_root", "root_parameter"]


def parse_root(spec: str) -> RootSpec:
    """Parse ``PATH`` or ``NAME=PATH`` into a checked :class:`RootSpec`.

    Raises:
        UsageError: the path is empty (``NAME=``), does not exist, is not a
            directory, or is unreadable; the NAME (given, or the folder's own name) is
            not a plain name (:func:`kbsync.models.root_name_problem`).
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
    root = RootSpec(name=name or resolved.name or "root", path=resolved)
    problem = root_name_problem(root.name)
    if problem is not None:
        given = f"root name {root.name!r}" if name else \
            f"root {raw_path!r} is named after its folder, whose name {root.name!r}"
        raise UsageError(f"{given} {problem}; give the root a plain name with NAME=PATH "
                         "(e.g. docs=PATH)")
    return root


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




def discover(
    root: RootSpec,
    *,
    accept: Callable[[Path], bool] = lambda _p: True,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    quiet: bool = False,
) -> Discovery:
    """List the files under ``root`` in a stable (doc_id) order.

    The whole root at once; a large root's plan walks it in slices instead
    (:func:`kbsync.ingest.walk.iter_files`, :mod:`kbsync.ingest.plan`).

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
    result.files = drop_ambiguous(result, iter_files(result, WalkRules(accept, include, exclude)))
    log_unlogged(result)
    return result


def drop_ambiguous(result: Discovery, files: Iterable[SourceFile]) -> list[SourceFile]:
    """``files`` (in doc_id order) with one file per doc_id: a name with an undecodable
    byte (``lat<0xE9>.md``) shows as the name spelled with a literal backslash
    (``lat\\xe9.md``). The file whose name is valid UTF-8 keeps the doc_id; the other is
    skipped and reported, since two files under one doc_id would overwrite each other on
    every run."""
    kept: list[SourceFile] = []
    for source in files:  # sorted by doc_id: equal ones are neighbours
        if kept and kept[-1].doc_id == source.doc_id:
            first, other = sorted((kept[-1], source), key=lambda f: f.display != str(f.path))
            kept[-1] = first
            problem(result, other.rel_path, other.path, ErrorCode.AmbiguousName,
                    f"skipped: its name shows as {other.doc_id}, the doc_id of another "
                    "file (one spelled with a literal \\x); rename one of them")
            continue
        kept.append(source)
    return kept


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
