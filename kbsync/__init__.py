"""kbsync: keep a searchable Qdrant knowledge base in sync with document folders.

The public search API::

    import kbsync

    result = kbsync.search("ERR_7Q4Z on upload", namespace="docs", k=5, mode="hybrid")
    for hit in result.results:
        print(kbsync.citation(hit), hit.score)

``kbsync.search(...)`` opens what it is not given (settings from ``KBSYNC_*``,
the store, the embedding model, the chat model for ``mqe``/``hyde``) and
returns a typed :class:`SearchResult`; see :func:`kbsync.query.search.search_kb`. It takes
the keywords above or one :class:`SearchRequest` (``kbsync.search(kbsync.SearchRequest(
"ERR_7Q4Z", namespace="docs"))``), the record every door hands to the query side.
``kbsync.search`` is also that module (``kbsync.search.search`` takes an open
store and service, for repeated searches). Importing kbsync loads no engine
and no model; the heavy imports happen on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kbsync.query import search  # the module is callable (see its last lines)
    from kbsync.query.search import SearchMode, SearchRequest, SearchResult, citation, search_kb

__all__ = ["SearchMode", "SearchRequest", "SearchResult", "citation", "search", "search_kb"]


def __getattr__(name: str) -> Any:
    # Loaded on first use (PEP 562): every ``kbsync.*`` import runs this file, and the query
    # side costs ~70 ms that ``kbsync --help``, ``stats`` or an ingest do not need.
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from kbsync.query import search as module

    value = module if name == "search" else getattr(module, name)
    globals()[name] = value
    return value
