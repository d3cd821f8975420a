"""One search as asked: :class:`SearchRequest`, the one place its options are spelled.

Every door carries a request to the query side: the CLI (``kbsync search/ask/eval``),
the Python API (:mod:`kbsync.api`, ``kbsync.search(...)``), :func:`kbsync.query.answer.ask`
and the evaluation (:func:`kbsync.eval.run.run_mode`). The keyword forms those doors keep
(``search("q", k=3, root="docs")``) go through :meth:`SearchRequest.build`, so a new
option or filter is added here once and every door takes it.

Invariants: a request is valid once it exists (a non-blank query, ``1 <= k <= MAX_K``,
``0 <= mqe <= MAX_MQE``, a known mode, filters built by
:meth:`kbsync.query.filters.SearchFilters.build`), and it is frozen: a changed request is
a new one (:func:`dataclasses.replace` checks it again).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime
from enum import Enum
from typing import Any

from kbsync.query.expand import MAX_MQE
from kbsync.query.filters import NO_FILTERS, SearchFilters

MAX_K = 100
"""The most results one search returns (and the deepest an evaluation ranks)."""


class SearchMode(str, Enum):
    """How candidates are found."""

    DENSE = "dense"
    HYBRID = "hybrid"


@dataclass(frozen=True)
class SearchRequest:
    """What to search, where, how many, how, and narrowed by what.

    Attributes:
        query: the user's text (not blank).
        namespace: only this namespace's chunks are considered.
        k: number of results (1..100).
        mode: ``hybrid`` (default: it beat dense on data/eval, see docs/retrieval.md) or
            ``dense``; hybrid needs the collection's sparse vector. A string is accepted.
        mqe: number of LLM rephrasings to search as well (0..10).
        hyde: also search an LLM-written hypothetical answer passage.
        min_score: drop candidates scoring below it: a cosine similarity in ``dense``
            mode, a fused score (about 0-1, :mod:`kbsync.query.fusion`) in ``hybrid``;
            for ``ask``, the relevance threshold of the passages given to the model.
        filters: root, path prefix, types, modified since (:mod:`kbsync.query.filters`).
        as_user: search as this user (a name, or a uid): what the calling process may read,
            narrowed to what that user may read (never widened); ``None``: the calling
            process itself (:func:`kbsync.catalog.access.access_condition`).

    Raises:
        ValueError: blank query, or ``k``/``mqe``/``mode`` out of range.
    """

    query: str
    namespace: str = "default"
    k: int = 5
    mode: SearchMode = SearchMode.HYBRID
    mqe: int = 0
    hyde: bool = False
    min_score: float | None = None
    filters: SearchFilters = NO_FILTERS
    as_user: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.query, str) or not self.query.strip():
            raise ValueError("query is empty")
        if not 1 <= self.k <= MAX_K:
            raise ValueError(f"k must be between 1 and {MAX_K}, got {self.k}")
        if not 0 <= self.mqe <= MAX_MQE:
            raise ValueError(f"mqe must be between 0 and {MAX_MQE}, got {self.mqe}")
        object.__setattr__(self, "mode", SearchMode(self.mode))  # "dense" -> SearchMode.DENSE
        if not isinstance(self.filters, SearchFilters):
            raise TypeError(f"filters must be SearchFilters (SearchFilters.build(...)), "
                            f"got {type(self.filters).__name__}")

    @classmethod
    def build(cls, query: str, *, namespace: str = "default", k: int = 5,
              mode: SearchMode | str = SearchMode.HYBRID, mqe: int = 0, hyde: bool = False,
              min_score: float | None = None, root: str | None = None,
              path_prefix: str | None = None, types: str | Sequence[str] | None = None,
              modified_since: str | date | datetime | None = None,
              as_user: str | None = None) -> SearchRequest:
        """A request from the keyword form every door accepts (the filters given flat).

        Args:
            query, namespace, k, mode, mqe, hyde, min_score: the attributes above.
            root, path_prefix, types, modified_since: query-time filters, see
                :meth:`kbsync.query.filters.SearchFilters.build` (``types``: ``"pdf,html"``
                or a list; ``modified_since``: an ISO string, date or datetime).
            as_user: the reader to search as (above).

        Raises:
            ValueError: blank query, or ``k``/``mqe``/``mode`` out of range.
            UsageError: a malformed filter value.
        """
        # The plain options are checked first, the filters then (as a search always has).
        request = cls(query=query, namespace=namespace, k=k, mode=SearchMode(mode), mqe=mqe,
                      hyde=hyde, min_score=min_score,
                      as_user=None if as_user is None else str(as_user))
        if root is None and path_prefix is None and types is None and modified_since is None:
            return request
        return replace(request, filters=SearchFilters.build(
            root=root, path_prefix=path_prefix, types=types, modified_since=modified_since))


def as_request(query: str | SearchRequest, **options: Any) -> SearchRequest:
    """``query`` as a request: a :class:`SearchRequest` as it is, a text with ``options``
    (the keywords of :meth:`SearchRequest.build`).

    Raises:
        TypeError: a request and options together (which should win is not ours to guess),
            or an unknown option.
        ValueError, UsageError: as :meth:`SearchRequest.build`.
    """
    if isinstance(query, SearchRequest):
        if options:
            raise TypeError(f"a SearchRequest carries its own options; got "
                            f"{', '.join(sorted(options))} as well")
        return query
    return SearchRequest.build(query, **options)
