"""Labelled query files for evaluation: JSONL or CSV, every bad line reported.

JSONL: one object per line, ``{"query": "...", "relevant": ["root/path.md", ...]}``
(other keys are ignored; a line nested past the parser's depth limit is a bad line). CSV: a header naming ``query`` and ``relevant``
columns, doc_ids separated by ``|``. Blank lines are skipped; any other line
that cannot be used is reported with its number, all of them in one
:class:`QueryFileError`, and nothing is skipped silently. ``"relevant": []`` is
allowed: such a query is searched and counted but has no quality score.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from kbsync.errors import QueryFileError, UsageError


@dataclass(frozen=True)
class EvalQuery:
    """One labelled query; ``line`` is its 1-based line number in the file."""

    line: int
    query: str
    relevant: tuple[str, ...]


def load_queries(path: str | Path) -> list[EvalQuery]:
    """Parse a JSONL or CSV query file (format from the extension, else sniffed).

    Raises:
        UsageError: the file does not exist or cannot be read.
        QueryFileError: bad lines (all of them, with numbers), or no query at all.
    """
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except FileNotFoundError:
        raise UsageError(f"query file {str(path)!r} does not exist") from None
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[:exc.start].count(b"\n") + 1
        raise QueryFileError(str(path), [(line, "not valid UTF-8")]) from exc
    except OSError as exc:
        raise UsageError(f"cannot read query file {str(path)!r}: {exc.strerror or exc}") from exc
    suffix = path.suffix.lower()
    is_csv = suffix in (".csv", ".tsv") or (
        suffix not in (".jsonl", ".ndjson", ".json") and not text.lstrip().startswith("{"))
    queries, problems = (_parse_csv(text) if is_csv else _parse_jsonl(text))
    if not queries and not problems:
        problems.append((0, "no queries in file"))
    if problems:
        raise QueryFileError(str(path), problems)
    return queries


def _parse_jsonl(text: str) -> tuple[list[EvalQuery], list[tuple[int, str]]]:
    queries: list[EvalQuery] = []
    problems: list[tuple[int, str]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError as exc:  # JSONDecodeError, or an integer over Python's digit limit
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            problems.append((number, f"not valid JSON ({reason})"))
            continue
        except RecursionError:  # the parser recurses per level; the format has two
            problems.append((number, "nested too deeply (a line is one object holding a "
                                     "'query' string and a 'relevant' list of strings)"))
            continue
        if not isinstance(obj, dict):
            problems.append((number, "expected a JSON object"))
            continue
        _check(number, obj.get("query"), obj.get("relevant", _MISSING), queries, problems)
    return queries, problems


def _parse_csv(text: str) -> tuple[list[EvalQuery], list[tuple[int, str]]]:
    queries: list[EvalQuery] = []
    problems: list[tuple[int, str]] = []
    reader = csv.reader(io.StringIO(text, newline=""))
    header_line = 0
    header: list[str] | None = None
    for row in reader:
        if not any(cell.strip() for cell in row):
            continue
        if header is None:
            header_line, header = reader.line_num, [c.strip().lower() for c in row]
            if "query" not in header or "relevant" not in header:
                problems.append((header_line, "CSV header must name the columns query,relevant"))
                return queries, problems
            continue
        # A quoted field may span lines: report the line the record starts on.
        number = reader.line_num - sum(cell.count("\n") for cell in row)
        if len(row) != len(header):
            problems.append((number, f"expected {len(header)} fields, got {len(row)}"))
            continue
        cells = dict(zip(header, row))
        relevant = [d.strip() for d in cells["relevant"].split("|") if d.strip()]
        _check(number, cells["query"], relevant, queries, problems)
    if header is None:
        problems.append((0, "empty CSV file (expected a query,relevant header)"))
    return queries, problems


_MISSING = object()


def _check(number: int, query: Any, relevant: Any, out: list[EvalQuery],
           problems: list[tuple[int, str]]) -> None:
    if not isinstance(query, str) or not query.strip():
        problems.append((number, "'query' must be a non-empty string"))
        return
    if relevant is _MISSING:
        problems.append((number, "'relevant' is missing (use [] for a query with no answer)"))
        return
    if not isinstance(relevant, list) or not all(isinstance(d, str) and d.strip()
                                                 for d in relevant):
        problems.append((number, "'relevant' must be a list of doc_id strings"))
        return
    unique = tuple(dict.fromkeys(d.strip() for d in relevant))
    out.append(EvalQuery(line=number, query=query.strip(), relevant=unique))


def queries_hash(queries: Sequence[EvalQuery]) -> str:
    """Identity of a query set (text and labels, not line numbers): reports compare only
    runs over the same set."""
    data = json.dumps([[q.query, sorted(q.relevant)] for q in queries], ensure_ascii=False)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()[:16]
