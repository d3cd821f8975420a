"""Small typed records passed between the stages.

They are plain dataclasses (picklable, cheap) so Prefect can hand them from one
task to the next and Dask can ship them between processes.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from kbsync.errors import ErrorCode

_SURROGATE = re.compile("[\ud800-\udfff]")


def display_text(text: str) -> str:
    """``text`` as valid UTF-8: each lone surrogate becomes a visible escape.

    A surrogate from ``surrogateescape`` decoding (an undecodable byte of a
    file name, U+DC80..U+DCFF) becomes ``\\xNN``, exactly what
    ``os.fsencode(name).decode("utf-8", "backslashreplace")`` gives, so a path
    and the doc_id derived from it show the same escape. Any other lone
    surrogate becomes ``\\uNNNN``. Valid text is returned unchanged (fast path).
    """
    if not _SURROGATE.search(text):
        return text
    return _SURROGATE.sub(_escape_surrogate, text)


def _escape_surrogate(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def display_path(path: os.PathLike | str) -> str:
    """A path as valid UTF-8 for payloads, state records, failures and logs.

    Never open the result: undecodable bytes are written as ``\\xNN`` escapes
    (see :func:`display_text`), so only the original path names the file.
    """
    return display_text(os.fspath(path))


def root_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a root NAME, or ``None`` when it can.

    A root NAME is the first segment of its documents' doc_ids (``NAME/rel/path``), a
    payload filter value and a word of terminal lines, so it must be one plain path
    segment: not blank, not ``.`` or ``..`` (a doc_id ``../x`` reads as a path out of
    the share), no ``/``, and no control character or line/paragraph separator (a
    newline would forge a second line in every log, report and prompt naming it).
    """
    if not name.strip():
        return "is blank"
    if name in (".", ".."):
        return f"is {name!r}, which reads as a path segment, not a name"
    if "/" in name:
        return "holds a '/'"
    odd = control_character(name)
    if odd is not None:
        return f"holds the control character U+{ord(odd):04X}"
    return None


def control_character(text: str) -> str | None:
    """The first control character (Unicode Cc) or line/paragraph separator in ``text``."""
    import unicodedata

    return next((c for c in text if unicodedata.category(c) in ("Cc", "Zl", "Zp")), None)


def name_key(name: str) -> str:
    """What two names that a reader cannot tell apart share: NFKC, then case folded
    (``Docs``, ``DOCS`` and fullwidth ``ｄｏｃｓ`` all give ``docs``)."""
    import unicodedata

    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", name).casefold())


class DocStatus(str, Enum):
    """State of a committed document."""

    OK = "ok"
    PARTIAL = "partial"  # some chunks carry a zero-vector fallback


class SyncMode(str, Enum):
    """incremental never deletes missing documents; full deletes them per root."""

    INCREMENTAL = "incremental"
    FULL = "full"


class PlanAction(str, Enum):
    """What the plan decided for one document."""

    NEW = "new"
    CHANGED = "changed"
    UNCHANGED = "unchanged"
    HEAL = "heal"  # unchanged bytes, but some chunks carry the zero-vector fallback
    MISSING = "missing"


@dataclass(frozen=True)
class RootSpec:
    """A root directory and the name its doc_ids start with.

    Invariant: ``name`` is valid UTF-8 (a folder named in Latin-1 gets ``\\xNN``
    escapes, as in every doc_id); ``path`` stays the real OS path.
    """

    name: str
    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", display_text(self.name))


@dataclass(frozen=True, slots=True)  # slots: a plan holds one per file (100k+ at scale)
class SourceFile:
    """A file found under a root. ``doc_id`` is ``root name / relative POSIX path``."""

    doc_id: str
    root: str
    path: Path
    rel_path: str
    size: int
    mtime_ns: int
    content_hash: str | None = None
    # The resolved root it was found under: every read of the file must stay inside it
    # (kbsync.convert.safe_read). None for texts that are no file (the Python API).
    root_path: Path | None = None
    # Who may read it (kbsync.perms.rule.Profile): its id and grant keys, captured at
    # discovery from stat and the access ACL. None for texts that are no file.
    access: str | None = None
    access_grants: tuple[str, ...] = ()

    def with_hash(self, content_hash: str) -> "SourceFile":
        """A copy carrying ``content_hash`` (``dataclasses.replace`` costs 10 times more, and
        a plan makes one a file); tests/ingest/test_plan_fast_paths.py checks that it copies
        every other field."""
        return SourceFile(self.doc_id, self.root, self.path, self.rel_path, self.size,
                          self.mtime_ns, content_hash, self.root_path, self.access,
                          self.access_grants)

    @property
    def display(self) -> str:
        """``path`` as valid UTF-8 (:func:`display_path`): what payloads and records store.

        ``path`` itself stays the real OS path, the only one to open.
        """
        return display_path(self.path)


@dataclass
class Document:
    """A converted file: Markdown plus where each page starts.

    Invariant: ``page_offsets`` is empty or strictly increasing character
    offsets into ``markdown``, the i-th being where page ``i + 1`` starts.
    ``ocr_pages`` maps the 1-based number of each page whose text came from OCR to the
    engine's mean word confidence (0-100); ``scanned_pages`` counts the pages that had no
    usable text layer (missing or garbled), whether OCR read them or not.
    """

    doc_id: str
    path: str
    markdown: str
    title: str
    source_type: str
    converter: str
    page_offsets: list[int] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    ocr_pages: dict[int, float] = field(default_factory=dict)
    scanned_pages: int = 0

    @property
    def page_count(self) -> int | None:
        """Number of pages (or slides) when the format has them."""
        return len(self.page_offsets) or None


@dataclass(frozen=True)
class SparseVec:
    """A sparse vector: unique non-negative 32-bit ``indices`` and their finite ``values``.

    An empty vector (no indices) is allowed: it is stored as "no sparse vector"
    and, as a query, matches nothing. The text floor makes them (BM25 encoders) and the
    store keeps them, so the type lives here, below both; the store checks the invariant
    (:func:`kbsync.store.validate.check_sparse`).
    """

    indices: list[int]
    values: list[float]


@dataclass(frozen=True)
class Chunk:
    """A piece of a document's Markdown within the token budget."""

    doc_id: str
    chunk_index: int
    text: str
    heading_path: str
    page_start: int | None = None
    page_end: int | None = None
    token_count: int = 0


@dataclass(slots=True)  # slots: a plan holds one per recorded document (100k+ at scale)
class DocState:
    """What the store knows about one document of one namespace."""

    doc_id: str
    namespace: str
    root: str
    path: str
    content_hash: str
    fingerprint: str
    chunk_count: int
    status: DocStatus
    updated_at: str
    run_id: str
    size: int
    mtime_ns: int
    scanned_pages: int | None = None
    """Pages without a usable text layer at the last write; ``None`` in records written
    before OCR existed (unknown). Decides whether OCR settings enter the document's
    fingerprint (:func:`kbsync.catalog.state.document_fingerprint`)."""
    access: str | None = None
    """The id of the permission profile its points carry (:mod:`kbsync.perms.rule`);
    ``None`` in records written before permissions were captured: the next run sets it
    without converting or embedding (``permissions_updated``)."""

    def to_payload(self) -> dict[str, Any]:
        """The record as a JSON-able payload. Every field is a scalar, so a shallow copy
        (``dataclasses.asdict`` deep-copies: 0.15 ms a record, most of a state commit)."""
        data = {name: getattr(self, name) for name in _STATE_FIELDS}
        data["status"] = self.status.value
        return data

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> "DocState":
        """Inverse of :meth:`to_payload`; unknown keys are ignored.

        A record as :meth:`to_payload` writes it takes the direct way (a plan reads one a
        file: 100,000 in a no-op sync of that many); any other (an older record without the
        optional fields, a status no member has) the general one, whose errors it raises.
        """
        intern, access = sys.intern, payload.get("access")
        try:  # a TypeError: a value intern refuses (not a string), left to the general way
            return cls(payload["doc_id"], intern(payload["namespace"]), intern(payload["root"]),
                       payload["path"], payload["content_hash"], intern(payload["fingerprint"]),
                       payload["chunk_count"], _STATUSES[payload["status"]],
                       payload["updated_at"], intern(payload["run_id"]), payload["size"],
                       payload["mtime_ns"], payload["scanned_pages"],
                       intern(access) if type(access) is str else access)
        except (KeyError, TypeError):
            return cls._from_any_payload(payload)

    @classmethod
    def _from_any_payload(cls, payload: dict[str, Any]) -> "DocState":
        names = cls.__dataclass_fields__.keys()
        data = {k: payload[k] for k in names if k in payload}
        data["status"] = DocStatus(data.get("status", DocStatus.OK.value))
        for name in _SHARED_FIELDS:  # one string per value, not one per record (a plan
            if isinstance(data.get(name), str):  # loads every record of a root at once)
                data[name] = sys.intern(data[name])
        return cls(**data)


_STATE_FIELDS = tuple(DocState.__dataclass_fields__)
"""DocState's fields in order (all scalars: :meth:`DocState.to_payload` copies them)."""

_SHARED_FIELDS = ("namespace", "root", "fingerprint", "run_id", "access")
"""DocState fields whose values most records share: interned on load."""
_STATUSES = {status.value: status for status in DocStatus}


@dataclass(frozen=True)
class Failure:
    """A file that could not be processed, as reported in ``failures``.

    Invariant: every field is valid UTF-8 (lone surrogates escaped by
    :func:`display_text`), whatever path or exception text it was built from,
    so the JSON summary and the Prefect artifact always serialise.
    """

    doc_id: str
    path: str
    error: ErrorCode
    message: str

    def __post_init__(self) -> None:
        for name in ("doc_id", "path", "message"):
            object.__setattr__(self, name, display_text(str(getattr(self, name))))
        # A code given as its plain string becomes its member (an unknown one: ValueError).
        object.__setattr__(self, "error", ErrorCode(self.error))

    def to_dict(self) -> dict[str, str]:
        """JSON form (the code as its plain string, as ``failures[].error`` reports it)."""
        return {**asdict(self), "error": self.error.value}


@dataclass(frozen=True)
class SearchHit:
    """One search result with its citation fields."""

    rank: int
    score: float
    doc_id: str
    path: str
    chunk_index: int
    heading_path: str
    page_start: int | None
    page_end: int | None
    text: str

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the ``results[]`` element of ``kbsync search --json``)."""
        return asdict(self)
