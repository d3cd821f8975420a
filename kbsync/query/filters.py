"""Query-time filters: narrow a search to one root, one folder, some file types, recent files.

Plain core code shared by ``kbsync search/ask/eval``, :mod:`kbsync.api` and
``kbsync.search(...)``. Every filter is ANDed with the mandatory namespace
filter (:func:`kbsync.query.search.namespace_filter`); none of them widens it.

Payload fields they match (written by :func:`kbsync.catalog.schema.build_points`,
each with a payload index, see ``CHUNK_INDEXES``):

- ``root``: the root NAME given to ``kbsync ingest`` (exact);
- ``folders``: the ancestor folders of the root-relative path, so a path
  prefix is one exact keyword match (``docs/api`` finds ``docs/api/x.md`` and
  ``docs/api/v2/y.md``, not ``docs/apix/z.md``); whole folder names only;
- ``source_type``: what the converter made of the file (:data:`SOURCE_TYPES`);
- ``modified``: the file's mtime in whole epoch seconds, at ingest time.

Limits: chunks written before payload version 2 (``kbsync.catalog.schema.PAYLOAD_VERSION``)
lack ``folders`` and ``modified`` and never match those two filters; search
says so in a note (see :func:`stale_note`), and the next ``kbsync ingest``
rewrites them.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, timezone
from typing import Any

from kbsync.errors import UsageError
from kbsync.store.base import Condition, Filter, Match, Range, VectorStore

SOURCE_TYPES = ("pdf", "html", "docx", "xlsx", "pptx", "csv", "markdown", "text", "json", "code",
                "image")
"""The ``source_type`` values the converters write (``kbsync/convert``)."""

TYPE_ALIASES = {"md": "markdown", "htm": "html", "xhtml": "html", "txt": "text"}
"""Names people type for a source type (file extensions)."""


@dataclass(frozen=True)
class SearchFilters:
    """The filters of one search; the default (all unset) filters nothing.

    Build with :meth:`build`, which validates and normalises every value.
    """

    root: str | None = None
    path_prefix: str | None = None
    types: tuple[str, ...] = ()
    modified_since: datetime | None = None  # timezone-aware

    @classmethod
    def build(cls, *, root: str | None = None, path_prefix: str | None = None,
              types: str | Iterable[str] | None = None,
              modified_since: str | date | datetime | None = None) -> SearchFilters:
        """Validated filters from user values.

        Args:
            root: a root NAME (as in ``kbsync ingest NAME=PATH``).
            path_prefix: a folder relative to the root, POSIX separators;
                leading ``./`` and slashes at either end are ignored.
            types: ``"pdf,html"`` or a sequence; aliases such as ``md`` are accepted.
            modified_since: an ISO date or datetime (string or object); a value
                without a timezone is UTC.

        Raises:
            UsageError: an empty or malformed value, an unknown type.
        """
        return cls(root=parse_root(root), path_prefix=parse_path_prefix(path_prefix),
                   types=parse_types(types), modified_since=parse_since(modified_since))

    @property
    def active(self) -> bool:
        """Whether any filter is set."""
        return bool(self.root or self.path_prefix or self.types or self.modified_since)

    @property
    def uses_new_fields(self) -> bool:
        """Whether a filter matches a field that chunks of payload version 1 lack."""
        return bool(self.path_prefix or self.modified_since)

    def conditions(self) -> tuple[Condition, ...]:
        """Store conditions, ANDed with the namespace filter by the caller."""
        out: list[Condition] = []
        if self.root:
            out.append(Match("root", self.root))
        if self.path_prefix:
            out.append(Match("folders", any_of=(self.path_prefix,)))
        if self.types:
            out.append(Match("source_type", any_of=self.types))
        if self.modified_since:
            # modified holds whole seconds: a file changed at 12:00:00.7 counts as 12:00:00.
            out.append(Range("modified", gte=math.floor(self.modified_since.timestamp())))
        return tuple(out)

    def apply(self, flt: Filter) -> Filter:
        """``flt`` narrowed by these filters."""
        return flt.and_also(*self.conditions()) if self.active else flt

    def to_dict(self) -> dict[str, Any]:
        """JSON form, every key present (``null``/``[]`` when unset)."""
        since = self.modified_since.isoformat() if self.modified_since else None
        return {"root": self.root, "path_prefix": self.path_prefix, "types": list(self.types),
                "modified_since": since}


NO_FILTERS = SearchFilters()

CLEAN_TTL_S = 300.0
"""How long a "no old chunks here" answer of :func:`stale_note` is reused."""

# (id(store), collection, namespace filter) -> (when checked, the store): the weak reference
# tells a reused id (a closed store's) from the store that was checked.
_clean: dict[tuple[int, str, str], tuple[float, weakref.ref]] = {}
_clean_lock = threading.Lock()


def parse_root(value: str | None) -> str | None:
    """A root NAME, trimmed (``None`` stays ``None``).

    Raises:
        UsageError: not a string, or blank.
    """
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"root must be a non-empty root name, got {value!r}")
    return value.strip()


def parse_path_prefix(value: str | None) -> str | None:
    """A folder relative to the root, as stored in ``folders`` (``None`` stays ``None``).

    Raises:
        UsageError: empty after trimming, or holding ``..``/``.`` parts or a backslash.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise UsageError(f"path prefix must be a string, got {value!r}")
    text = value.strip()
    while text.startswith("./"):
        text = text[2:]
    text = text.strip("/")
    parts = text.split("/")
    if not text or any(p in ("", ".", "..") for p in parts) or "\\" in text:
        raise UsageError(f"path prefix must be a folder relative to the root, like docs/api "
                         f"(no '..', '.', '//' or '\\'), got {value!r}")
    return text


def parse_types(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """Source types from ``"pdf,html"`` or a sequence, aliases resolved, order kept, no repeats.

    ``None`` and an empty sequence mean no type filter (the JSON form of no
    filter is ``[]``); an empty or blank string is refused.

    Raises:
        UsageError: an unknown type, or a string naming none.
    """
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    if not isinstance(value, str) and not items:
        return ()
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise UsageError(f"file type must be a string, got {item!r}")
        name = TYPE_ALIASES.get(item.strip().lower().lstrip("."), item.strip().lower().lstrip("."))
        if name not in SOURCE_TYPES:
            raise UsageError(f"unknown file type {item.strip()!r}: use "
                             f"{', '.join(SOURCE_TYPES)} (or md, htm, txt)")
        if name not in out:
            out.append(name)
    if not out:
        raise UsageError("file types must name at least one type, like pdf,html")
    return tuple(out)


def parse_since(value: str | date | datetime | None) -> datetime | None:
    """A timezone-aware datetime from an ISO date or datetime (no timezone = UTC).

    Raises:
        UsageError: not an ISO-8601 date or datetime.
    """
    if value is None:
        return None
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, date):
        moment = datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise UsageError(f"modified-since must be an ISO date or datetime, like 2024-05-01 "
                             f"or 2024-05-01T12:00:00+02:00, got {value!r}") from None
    else:
        raise UsageError(f"modified-since must be a date, datetime or ISO string, got {value!r}")
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def stale_note(store: VectorStore, collection: str, flt: Filter,
               filters: SearchFilters) -> str | None:
    """A note when the namespace holds chunks that the folder/date filters cannot see.

    ``flt`` is the namespace filter. On a store with a revision (the embedded one) the
    count is kept until the store is written (:mod:`kbsync.store.memo`). Elsewhere only a
    clean answer (no old chunk) is
    reused, for :data:`CLEAN_TTL_S` per store object, collection and namespace
    (the exact count is an indexed one, see :func:`count_old` and
    ``tests/bench/search_bench.py``); while old chunks are there every
    filtered search says so, until the next ingest has rewritten them.
    """
    if not filters.uses_new_fields:
        return None
    from kbsync.catalog.schema import PAYLOAD_VERSION  # late: the CLI parser imports this module

    from kbsync.store.memo import remember, revision_of

    if revision_of(store) is not None:  # any answer holds until the store is written
        old = remember(store, ("old chunks", collection, repr(flt)),
                       lambda: count_old(store, collection, flt, PAYLOAD_VERSION))
        return _stale_text(old) if old else None
    key = (id(store), collection, repr(flt))
    now = time.monotonic()
    with _clean_lock:
        checked, ref = _clean.get(key, (-math.inf, None))
        if ref is not None and ref() is store and now - checked < CLEAN_TTL_S:
            return None
    old = count_old(store, collection, flt, PAYLOAD_VERSION)
    if not old:
        try:
            ref = weakref.ref(store)
        except TypeError:  # a store type without weak references: no reuse
            return None
        with _clean_lock:
            _clean[key] = (now, ref)
        return None
    return _stale_text(old)


def _stale_text(old: int) -> str:
    return (f"{old} chunks in this namespace were written before the path-prefix and "
            "modified-since filters existed and are left out by them: run `kbsync ingest` "
            "on their roots again (it rewrites them once; embeddings come from the cache)")


def count_old(store: VectorStore, collection: str, flt: Filter, version: int) -> int:
    """Chunks matching ``flt`` whose payload version is below ``version`` or missing.

    A range, not an equality: ``payload_version`` has a range-only integer index,
    which serves it (~0.2 ms at 2k chunks a namespace; an equality on it read
    every payload: 70-100 ms at 10k a namespace).
    """
    return store.count(collection, Filter(flt.must, flt.must_not
                                          + (Range("payload_version", gte=version),)))
