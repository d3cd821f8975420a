"""Where ``kbsync mcp`` reads: the reader's own store in process, or a shared ``kbsync serve``.

Both backends take the request JSON of the doors (``query``, ``namespace``, ``k``, ``mode``,
``mqe``, ``hyde``, ``min_score``, ``root``, ``path_prefix``, ``types``, ``modified_since``)
and return what ``kbsync search/ask/stats --json`` print for it, field for field: the tools
(:mod:`kbsync.mcp_server.tools`) cannot tell them apart. Permissions apply either way:

- :class:`LocalBackend` reads the store of ``KBSYNC_HOME`` as this process (the reader runs
  ``kbsync mcp`` as themselves, so it is their own private store, 0700), through the one
  permission filter with no ``as_user``;
- :class:`RemoteBackend` sends the request to ``KBSYNC_SERVER``, whose owner's process
  names the caller (the socket's peer uid, or the HTTP token's user) and filters for it.
  A request never carries an identity of its own.

Limits: one call at a time per backend (the tools hold a lock around each call); the
embedded store is opened for a call and closed after it, so the MCP server never holds the
store's folder between calls and an ingest can start at any time (reads during an ingest
go through its read relay, :mod:`kbsync.store.edge.relay`). The cost is one open per call:
40-60 ms on a small store, about 2 s at a million chunks (docs/store.md); a large index is
better read through ``kbsync serve``. The embedding model stays
loaded for the process (:func:`kbsync.embed.build_embedding_service`). Each call follows
the active pointer again, so a rebuild's swap is seen without a restart.

Tested by ``tests/mcp_server/test_mcp_stdio.py``.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Mapping
from typing import Any, Protocol

from kbsync.errors import UsageError
from kbsync.settings import Settings

log = logging.getLogger(__name__)

SEARCH_KEYS = frozenset({"query", "namespace", "k", "mode", "mqe", "hyde", "min_score", "root",
                         "path_prefix", "types", "modified_since"})
"""The keys of a search request (the request JSON of ``kbsync serve``)."""
ASK_KEYS = SEARCH_KEYS - {"mode", "mqe", "hyde"}
"""``ask`` searches the plain question, dense."""


class Backend(Protocol):
    """What the MCP tools read through.

    Each method takes the request JSON (keys of :data:`SEARCH_KEYS`; ``stats`` only
    ``namespace``) and returns the ``--json`` object of the CLI command of the same name.

    Raises:
        UsageError: a malformed request (blank query, ``k`` out of 1..100, a bad filter).
        KbsyncError: any other failure, as its kind (store unavailable, model failing, ...).
    """

    name: str

    def search(self, args: dict[str, Any]) -> dict[str, Any]: ...

    def ask(self, args: dict[str, Any]) -> dict[str, Any]: ...

    def stats(self, args: dict[str, Any]) -> dict[str, Any]: ...

    def close(self) -> None: ...


def _request(args: Mapping[str, Any], keys: frozenset[str], **defaults: Any):
    """The :class:`~kbsync.query.request.SearchRequest` of ``args`` (``None`` values left out,
    so the request's own defaults hold).

    Raises:
        UsageError: an unknown key, or a value the request refuses (one line).
    """
    from kbsync.query.request import SearchRequest

    unknown = sorted(set(args) - keys)
    if unknown:
        raise UsageError(f"unknown argument {', '.join(unknown)}")
    options = {**defaults, **{key: value for key, value in args.items() if value is not None}}
    query = options.pop("query", "")
    try:
        return SearchRequest.build(query, **options)
    except (ValueError, TypeError) as exc:  # blank query, k or mode out of range
        raise UsageError(str(exc)) from None


class LocalBackend:
    """The reader's own store, read by this process (see the module's docstring)."""

    name = "in process"

    def __init__(self, settings: Settings) -> None:
        self._configured = settings

    def _settings(self) -> Settings:
        """The settings aimed at the active collection now (a rebuild may have swapped it)."""
        from kbsync.catalog.active import resolve

        return resolve(self._configured, warn=False)

    def search(self, args: dict[str, Any]) -> dict[str, Any]:
        """``kbsync search --json`` of ``args``."""
        from kbsync.app.cli_support import indexed_store, nothing_indexed
        from kbsync.query.llm import chat_model
        from kbsync.query.search import SearchResult, search

        request = _request(args, SEARCH_KEYS)
        settings = self._settings()
        llm = chat_model(settings, optional=True) if (request.mqe or request.hyde) else None
        store = indexed_store(settings, request.namespace)
        if store is None:  # nothing to read: no model loaded, no folder made
            return SearchResult(query=request.query, namespace=request.namespace,
                                mode=request.mode.value, raw_count=0, kept_count=0,
                                notes=[nothing_indexed(settings, request.namespace)],
                                filters=request.filters.to_dict()).to_dict()
        from kbsync.embed import build_embedding_service

        try:
            return search(request, store=store, service=build_embedding_service(settings),
                          collection=settings.collection, llm=llm).to_dict()
        finally:
            store.close()

    def ask(self, args: dict[str, Any]) -> dict[str, Any]:
        """``kbsync ask --json`` of ``args`` (needs ``KBSYNC_LLM_*``)."""
        from kbsync.app.cli_support import indexed_store, nothing_indexed
        from kbsync.query.answer import DEFAULT_MIN_SCORE, Answer, ask
        from kbsync.query.llm import chat_model

        request = _request(args, ASK_KEYS, min_score=DEFAULT_MIN_SCORE)
        settings = self._settings()
        llm = chat_model(settings)  # a missing configuration fails before any search
        store = indexed_store(settings, request.namespace)
        if store is None:
            return Answer(query=request.query, namespace=request.namespace, mode="dense",
                          answer=nothing_indexed(settings, request.namespace), answered=False,
                          citations=[], raw_count=0, kept_count=0, results=[], latency_ms=0.0,
                          min_score=request.min_score,
                          filters=request.filters.to_dict()).to_dict()
        from kbsync.embed import build_embedding_service

        try:
            return ask(request, store=store, service=build_embedding_service(settings),
                       collection=settings.collection, llm=llm).to_dict()
        finally:
            store.close()

    def stats(self, args: dict[str, Any]) -> dict[str, Any]:
        """``kbsync stats --json`` (of ``args["namespace"]`` when given)."""
        from kbsync.app.cli_support import indexed_store
        from kbsync.query.stats import collect_stats, empty_stats

        unknown = sorted(set(args) - {"namespace"})
        if unknown:
            raise UsageError(f"unknown argument {', '.join(unknown)}")
        namespace = args.get("namespace")
        settings = self._settings()
        store = indexed_store(settings)
        if store is None:
            return empty_stats(settings, namespace)
        try:
            return collect_stats(store, settings, namespace)
        finally:
            store.close()

    def close(self) -> None:
        """Nothing is held between calls."""


class RemoteBackend:
    """A thin adapter over ``kbsync serve``'s client (:mod:`kbsync.serve.client`): the
    server decides who the caller is; its replies are the same ``--json`` objects."""

    name = "server"

    def __init__(self, client: Any, address: str) -> None:
        self._client = client
        self.address = address

    def search(self, args: dict[str, Any]) -> dict[str, Any]:
        """The server's ``/v1/search`` of ``args``."""
        return self._client.search(_present(args))

    def ask(self, args: dict[str, Any]) -> dict[str, Any]:
        """The server's ``/v1/ask`` of ``args``."""
        return self._client.ask(_present(args))

    def stats(self, args: dict[str, Any]) -> dict[str, Any]:
        """The server's ``/v1/stats`` of ``args``."""
        return self._client.stats(_present(args))

    def close(self) -> None:
        """Close the client's connection, when it has one to close."""
        close = getattr(self._client, "close", None)
        if callable(close):
            close()


def _present(args: Mapping[str, Any]) -> dict[str, Any]:
    """``args`` without the ``None`` values (the server's defaults hold for those)."""
    return {key: value for key, value in args.items() if value is not None}


def choose_backend(settings: Settings, env: Mapping[str, str] | None = None) -> Backend:
    """The server of ``KBSYNC_SERVER`` when it is set, else the reader's own store.

    Raises:
        UsageError: ``KBSYNC_SERVER`` is set but this installation has no server client.
        KbsyncError: the client refuses the address or token (its own error kinds).
    """
    env = os.environ if env is None else env
    address = env.get("KBSYNC_SERVER", "").strip()
    if not address:
        return LocalBackend(settings)
    try:  # by name: the server's client is another door, which this one only calls
        client_module = importlib.import_module("kbsync.serve.client")
    except ImportError as exc:
        raise UsageError(f"KBSYNC_SERVER={address} is set, but this kbsync has no server "
                         f"client ({exc}); unset it to read your own store") from None
    client = client_module.connect_from_env(env=env)
    if client is None:
        raise UsageError(f"KBSYNC_SERVER={address} names no server the client understands")
    return RemoteBackend(client, address)
