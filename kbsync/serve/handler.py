"""The one request handler behind every door of ``kbsync serve`` (issue 40).

A door (the Unix socket, HTTP) authenticates its caller as a
:class:`~kbsync.perms.reader.Reader` and hands :meth:`Handler.handle` an operation
(:data:`OPS`) with its JSON arguments; the answer is the JSON object that
``kbsync search/ask/stats --json`` prints in process, or a :class:`~kbsync.errors.KbsyncError`
whose class name is the error's ``kind`` and whose message is one line.

The reader is the request's ``as_user`` (:func:`kbsync.catalog.access.access_condition`:
the server's own view, narrowed to the reader's; never widened). No argument can change
it: ``as_user`` (or any key a command does not take) is refused, and the filters
(``root``, ``path_prefix``, ``types``, ``modified_since``) only narrow. The server's own
uid reads as in process (``as_user`` none), so the owner's answers equal the CLI's.

Limits: ``k`` at most :data:`~kbsync.query.request.MAX_K`; at most
``max_per_caller`` requests of one uid in flight (:class:`~kbsync.errors.ServerBusy`);
the door waits ``KBSYNC_QUERY_TIMEOUT_S`` plus :data:`MARGIN_S` for an answer
(:class:`~kbsync.errors.QueryTimeout`; the embedding and chat calls themselves end within
the budget, see :mod:`kbsync.query.search`). An unknown namespace (or one the reader
reads nothing of) is a :class:`~kbsync.errors.UsageError` that lists the namespaces the
reader can read.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor, TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Callable

from kbsync.errors import (InternalError, KbsyncError, QueryTimeout, ServerBusy,
                           UsageError)
from kbsync.perms.reader import Reader
from kbsync.serve.holder import StoreHolder
from kbsync.settings import Settings

log = logging.getLogger(__name__)

FILTER_KEYS = ("root", "path_prefix", "types", "modified_since")
OPS: dict[str, tuple[str, ...]] = {
    "search": ("query", "namespace", "k", "mode", "mqe", "hyde", "min_score", *FILTER_KEYS),
    "ask": ("query", "namespace", "k", "min_score", *FILTER_KEYS),
    "stats": ("namespace",),
    "health": (),
}
"""Each operation and the argument keys it takes (any other key is refused)."""
MAX_REQUEST_BYTES = 1 << 20
"""The largest request a door reads (1 MiB); a bigger one is refused unread."""
MAX_PER_CALLER = 4
"""Default cap on one caller's requests in flight (``kbsync serve --max-per-caller``)."""
MARGIN_S = 5.0
"""What a door waits beyond ``KBSYNC_QUERY_TIMEOUT_S`` (the store's and model's own time)."""
_TYPES: dict[str, tuple[type, ...]] = {
    "query": (str,), "namespace": (str,), "k": (int,), "mode": (str,), "mqe": (int,),
    "hyde": (bool,), "min_score": (int, float), "root": (str,), "path_prefix": (str,),
    "types": (str, list), "modified_since": (str,)}


@dataclass
class Outcome:
    """One answered request, for the access log: ``counts`` are the result's sizes."""

    result: dict[str, Any] | None = None
    error: KbsyncError | None = None
    counts: dict[str, int] = field(default_factory=dict)


def as_user_of(reader: Reader) -> str | None:
    """The ``as_user`` that narrows the server's view to ``reader``'s: ``None`` for the
    server's own uid (its view, as in process), else the name (a uid without a passwd entry:
    its number, an unknown reader that reads what "other" may)."""
    if reader.uid == os.geteuid():
        return None
    return reader.name if reader.known else str(reader.uid)


class Handler:
    """Answers requests for every door (module doc); thread-safe."""

    def __init__(self, settings: Settings, *, max_per_caller: int = MAX_PER_CALLER,
                 workers: int = 16) -> None:
        self.configured = settings
        self.holder = StoreHolder(settings)
        self.max_per_caller = max_per_caller
        self.budget_s = settings.query_timeout_s + MARGIN_S
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kbsync-serve")
        self._lock = threading.Lock()
        self._in_flight: dict[int, int] = {}
        self.started = time.time()

    # --- the door's call -----------------------------------------------------------------------
    def handle(self, op: Any, args: Any, reader: Reader) -> Outcome:
        """Answer one request; never raises (errors come back in the outcome)."""
        try:
            if not isinstance(op, str) or op not in OPS:
                raise UsageError(f"unknown operation {op!r}; the server answers "
                                 f"{', '.join(OPS)}")
            args = _checked_args(op, {} if args is None else args)
            work = getattr(self, f"_{op}")
            if op == "health":
                return _outcome(work(args, reader))
            with self._slot(reader):
                future = self._pool.submit(work, args, reader)
                try:
                    return _outcome(future.result(timeout=self.budget_s))
                except FutureTimeout:
                    raise QueryTimeout(
                        f"{op} did not finish within {self.budget_s:g} s "
                        f"(KBSYNC_QUERY_TIMEOUT_S={self.configured.query_timeout_s:g} plus "
                        f"{MARGIN_S:g}); retry, or ask the server's owner") from None
        except KbsyncError as exc:
            return Outcome(error=exc)
        except ValueError as exc:  # SearchRequest's checks (k, mqe, mode, blank query)
            return Outcome(error=UsageError(str(exc)))
        except Exception as exc:  # noqa: BLE001 - one line to the caller, the trace to the log
            log.exception("%s failed", op)
            return Outcome(error=InternalError(f"{type(exc).__name__}: {exc}"))

    def _slot(self, reader: Reader):
        handler = self

        class _Slot:
            def __enter__(self) -> None:
                with handler._lock:
                    n = handler._in_flight.get(reader.uid, 0)
                    if n >= handler.max_per_caller:
                        raise ServerBusy(f"{reader.name} already has {n} requests in flight "
                                         f"(the most one caller may have); retry when one "
                                         "has been answered")
                    handler._in_flight[reader.uid] = n + 1

            def __exit__(self, *exc: object) -> None:
                with handler._lock:
                    handler._in_flight[reader.uid] -= 1
        return _Slot()

    def close(self) -> None:
        """Finish the requests in flight, then close the store."""
        self._pool.shutdown(wait=True)
        self.holder.close()

    # --- operations ----------------------------------------------------------------------------
    def _settings(self, store: Any = None) -> Settings:
        """The configured settings aimed at the active collection (after a rebuild's swap:
        the new one), read per request. ``store``: the request's store, so that what the
        pointer leaves to the store (a collection without a pointer keeps its recorded local
        model) is read through it; without it, a store is opened for the read, which here is a
        relay connection to this very process per request (~15 ms with the local model)."""
        from kbsync.catalog.active import resolve

        return resolve(self.configured, store)

    def _search(self, args: dict, reader: Reader) -> dict:
        from kbsync.embed import build_embedding_service
        from kbsync.query.llm import chat_model
        from kbsync.query.search import search

        request = _request(args, reader)

        def work(store: Any) -> dict:
            settings = self._settings(store)
            llm = chat_model(settings, optional=True) if (request.mqe or request.hyde) else None
            result = search(request, store=store, service=build_embedding_service(settings),
                            collection=settings.collection, llm=llm)
            if not result.results:  # checked only then: one engine call less per search
                self._check_namespace(store, settings, request)
            return result.to_dict()
        return self.holder.run(work)

    def _ask(self, args: dict, reader: Reader) -> dict:
        from kbsync.embed import build_embedding_service
        from kbsync.query.answer import DEFAULT_MIN_SCORE, ask
        from kbsync.query.llm import chat_model

        if args.get("min_score") is None:
            args = {**args, "min_score": DEFAULT_MIN_SCORE}
        request = _request(args, reader)

        def work(store: Any) -> dict:
            settings = self._settings(store)
            llm = chat_model(settings)
            self._check_namespace(store, settings, request)
            return ask(request, store=store, service=build_embedding_service(settings),
                       collection=settings.collection, llm=llm).to_dict()
        return self.holder.run(work)

    def _stats(self, args: dict, reader: Reader) -> dict:
        from kbsync.query.stats import collect_stats, empty_stats

        namespace = args.get("namespace")

        def work(store: Any) -> dict:
            settings = self._settings(store)
            if store.collection_dimension(settings.collection) is None:
                return empty_stats(settings, namespace)
            return collect_stats(store, settings, namespace, as_user=as_user_of(reader))
        return self.holder.run(work)

    def _health(self, args: dict, reader: Reader) -> dict:
        settings = self._settings()
        return {"status": "ok", "pid": os.getpid(), "collection": settings.collection,
                "store": self.holder.mode, "handovers": self.holder.handovers,
                "reader": reader.name, "uptime_s": round(time.time() - self.started, 1)}

    def _check_namespace(self, store: Any, settings: Settings, request: Any) -> None:
        """Refuse a namespace the reader reads nothing of, naming those it can read."""
        from kbsync.query.search import reader_filter
        from kbsync.query.stats import collect_stats

        if store.collection_dimension(settings.collection) is not None and store.count(
                settings.collection, reader_filter(store, settings.collection, request)):
            return
        visible: list[str] = []
        if store.collection_dimension(settings.collection) is not None:
            stats = collect_stats(store, settings, None, as_user=request.as_user)
            visible = [ns for ns, c in stats["namespaces"].items() if c["documents"]]
        raise UsageError(f"unknown namespace {request.namespace!r} (or nothing in it you may "
                         f"read); namespaces you can read: "
                         f"{', '.join(visible) if visible else 'none'}")


def _checked_args(op: str, args: Any) -> dict:
    if not isinstance(args, dict):
        raise UsageError(f"{op}: arguments must be a JSON object")
    allowed = OPS[op]
    for key, value in args.items():
        if key not in allowed:
            why = (" (the server answers as the connected user; no request chooses another)"
                   if key == "as_user" else "")
            raise UsageError(f"{op}: unknown argument {key!r}{why}; it takes "
                             f"{', '.join(allowed) or 'none'}")
        ok = value is None or (isinstance(value, _TYPES[key])
                               and not (isinstance(value, bool) and key not in ("hyde",)))
        if not ok:
            raise UsageError(f"{op}: argument {key!r} has the wrong type "
                             f"({type(value).__name__})")
    if op in ("search", "ask") and not isinstance(args.get("query"), str):
        raise UsageError(f"{op}: argument 'query' (a string) is required")
    return args


def _request(args: dict, reader: Reader):
    """The :class:`~kbsync.query.request.SearchRequest` of ``args``, as ``reader``."""
    from kbsync.query.request import SearchRequest

    options = {k: v for k, v in args.items() if v is not None}
    return SearchRequest.build(options.pop("query"), as_user=as_user_of(reader), **options)


def _outcome(result: dict) -> Outcome:
    counts = {}
    if "results" in result:
        counts["results"] = len(result["results"])
        counts["kept"] = result.get("kept_count", 0)
    if "namespaces" in result:
        counts["namespaces"] = len(result["namespaces"])
    return Outcome(result=result, counts=counts)
