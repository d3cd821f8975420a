"""The query side: embed, search one namespace (dense or hybrid), expand, merge, de-duplicate.

Plain core code: it never starts a Prefect server.

- **Modes** (:class:`SearchMode`): ``dense`` (cosine over the dense vectors)
  and ``hybrid`` (the top 100 dense and top 100 BM25 candidates fused by
  weighted distribution-based score fusion, :mod:`kbsync.query.fusion`; scores are
  then fused scores in about ``[0, 1]``, not cosines).
- **Expansions**: with ``mqe=N`` a chat model writes N rephrasings, with
  ``hyde=True`` a hypothetical answer passage (embedded as a passage); see
  :mod:`kbsync.query.expand`. Every query text is searched with ``k * 4``
  candidates and hits are merged by best score per point id. When the model
  is missing or fails, search goes on with what it has (at least the plain
  query), logs a warning and says so in ``notes``. The chat calls share the
  query budget (the service's ``query_budget_s``, ``KBSYNC_QUERY_TIMEOUT_S``):
  a chat endpoint that does not answer within it costs that budget, once, and
  one note (the expansions left are skipped with it).
- **Counts**: ``raw_count`` sums the candidates the store returned over all
  searches (``k * 4`` each when the namespace holds enough chunks);
  ``kept_count`` is what is left after merging, the score threshold and
  duplicate-text removal; the first ``k`` of those are returned.
- **Isolation**: every store call carries the namespace filter, which also
  excludes points flagged ``embedding_failed`` (zero-vector fallbacks).
- **Filters** (:mod:`kbsync.query.filters`): ``root``, ``path_prefix``,
  ``types`` and ``modified_since`` narrow every store call further (ANDed
  with the namespace filter, in both modes and for every expansion); the
  result echoes them in ``filters``.

The module is callable: ``kbsync.search("query", namespace="ns")`` runs
:func:`search_kb`, which opens settings, store and model itself;
``kbsync.query.search.search`` is the core function with injected collaborators. Both take
one :class:`~kbsync.query.request.SearchRequest`, or its keyword form.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import sys
import time
import types
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from kbsync.query import expand
from kbsync.query.filters import SearchFilters, stale_note
from kbsync.query.request import MAX_K, SearchMode, SearchRequest, as_request
from kbsync.errors import EmbeddingError, KbsyncError
from kbsync.query.fusion import FUSION_DEPTH, Fusion, fuse, fusion_for
from kbsync.query.llm import ChatModel, chat_model
from kbsync.catalog.access import access_condition
from kbsync.catalog.identity import check_query_embedder
from kbsync.catalog.state import StateStore
from kbsync.models import SearchHit, SparseVec
from kbsync.settings import Settings
from kbsync.text.sparse import SparseEncoder
from kbsync.store.base import Filter, Match, ScoredPoint, VectorStore
from kbsync.store.memo import remember, revision_of, still

if TYPE_CHECKING:  # the types only
    from kbsync.embed.base import Embedder
    from kbsync.settings import Settings

log = logging.getLogger(__name__)

CANDIDATE_FACTOR = 4

__all__ = ["MAX_K", "SearchMode", "SearchRequest", "SearchResult", "citation", "search",
           "search_kb"]


@dataclass
class SearchResult:
    """The JSON contract of ``kbsync search --json``.

    ``expansions`` are the extra texts searched besides ``query`` (MQE
    rephrasings, then the HyDE passage); ``notes`` say what did not go as
    asked (e.g. "no chat model configured: searched the plain query").
    """

    query: str
    namespace: str
    mode: str
    raw_count: int
    kept_count: int
    results: list[SearchHit] = field(default_factory=list)
    latency_ms: float = 0.0
    expansions: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    filters: dict[str, Any] = field(default_factory=lambda: SearchFilters().to_dict())

    def to_dict(self) -> dict:
        """JSON form."""
        data = asdict(self)
        data["results"] = [h.to_dict() for h in self.results]
        return data


@dataclass(frozen=True)
class _Probe:
    """One text to search: a query (embedded as a query) or a HyDE passage."""

    text: str
    passage: bool = False


def namespace_filter(namespace: str, access: Match | None) -> Filter:
    """Every search is confined to one namespace, to what its reader may read (``access``:
    :func:`kbsync.catalog.access.access_condition`; ``None`` only where that says nothing
    is filtered), and skips zero-vector fallbacks."""
    flt = Filter.where(namespace=namespace).and_not("embedding_failed", True)
    return flt if access is None else flt.and_also(access)


def reader_filter(store: VectorStore, collection: str, request: SearchRequest) -> Filter:
    """The filter of ``request``'s namespace as its reader sees it (:func:`namespace_filter`),
    before the request's own filters narrow it further.

    Raises:
        PermissionsNotCaptured, UsageError: see :func:`kbsync.catalog.access.access_condition`.
    """
    states = StateStore(store, Settings.state_collection_of(collection))
    return namespace_filter(request.namespace,
                            access_condition(states, request.namespace, request.as_user))


def search(
    query: str | SearchRequest,
    *,
    store: VectorStore,
    service: Embedder,
    collection: str,
    llm: ChatModel | None = None,
    **options: Any,
) -> SearchResult:
    """Search one request: ``search(SearchRequest(...), ...)`` or ``search("text", **options)``.

    Args:
        query: a :class:`~kbsync.query.request.SearchRequest`, or the query text with
            ``options``, the keywords of :meth:`SearchRequest.build
            <kbsync.query.request.SearchRequest.build>` (namespace, k, mode, mqe, hyde,
            min_score, and the filters root, path_prefix, types, modified_since).
        store: an open vector store.
        service: the embedding service the collection was built with.
        collection: chunk collection name.
        llm: the chat model for ``mqe``/``hyde``; ``None`` = not configured
            (the plain query is searched and a note says so). Its calls together end
            within ``service.query_budget_s`` when the service has one (module doc).

    Raises:
        ValueError: blank query, or ``k``/``mqe``/``mode`` out of range.
        UsageError: a malformed filter value.
        TypeError: a request and ``options`` together, or an unknown option.
        EmbedderMismatch: the collection was built with another embedder
            (see :mod:`kbsync.catalog.identity`).
        KbsyncError: the store or the embedding model failed (a failing chat
            model only adds a note).
    """
    request = as_request(query, **options)
    k, mode, filters = request.k, request.mode, request.filters
    started = time.perf_counter()
    # Vectors of another model are not comparable, even with the same dimension.
    sparse = check_query_embedder(store, service, collection=collection)
    notes: list[str] = []
    probes = [_Probe(request.query)] + _expansions(
        request.query, mqe=request.mqe, hyde=request.hyde, llm=llm, notes=notes,
        budget_s=getattr(service, "query_budget_s", None))
    flt = reader_filter(store, collection, request)
    stale = stale_note(store, collection, flt, filters)
    if stale:
        _note(notes, stale)
    flt = filters.apply(flt)
    revision = revision_of(store)
    run: _Run | None = None
    if revision is not None and matches_every_point(store, collection, flt):
        # The filter leaves nothing out (one namespace, every chunk readable): the engine
        # scans without it, unless a write started meanwhile (then it is searched again).
        run = _run_probes(probes, store=store, service=service, collection=collection,
                          mode=mode, limit=k * CANDIDATE_FACTOR, flt=None, sparse=sparse)
        if not still(store, revision):
            run = None
    if run is None:
        run = _run_probes(probes, store=store, service=service, collection=collection,
                          mode=mode, limit=k * CANDIDATE_FACTOR, flt=flt, sparse=sparse)
    best, raw, searched, skipped = run
    for text in skipped:
        _note(notes, text)
    kept = keep(list(best.values()), min_score=request.min_score)
    hits = [to_hit(rank, p) for rank, p in enumerate(kept[:k], 1)]
    return SearchResult(query=request.query, namespace=request.namespace, mode=mode.value,
                        raw_count=raw, kept_count=len(kept), results=hits,
                        latency_ms=round((time.perf_counter() - started) * 1000, 2),
                        expansions=[p.text for p in searched[1:]], notes=notes,
                        filters=filters.to_dict())


_Run = tuple[dict[str, ScoredPoint], int, list[_Probe], list[str]]


def _run_probes(probes: Sequence[_Probe], *, store: VectorStore, service: Embedder,
                collection: str, mode: SearchMode, limit: int, flt: Filter | None,
                sparse: SparseEncoder) -> _Run:
    """Every probe searched: the best point per id, the candidates returned, the probes
    searched, and the notes of those skipped (added by the caller, once)."""
    best: dict[str, ScoredPoint] = {}
    raw = 0
    searched: list[_Probe] = []
    skipped: list[str] = []
    for probe in probes:
        points = _search_one(probe, store=store, service=service, collection=collection,
                             mode=mode, limit=limit, flt=flt, notes=skipped, sparse=sparse)
        if points is None:
            continue
        searched.append(probe)
        raw += len(points)
        for point in points:
            if point.id not in best or point.score > best[point.id].score:
                best[point.id] = point
    return best, raw, searched, skipped


def matches_every_point(store: VectorStore, collection: str, flt: Filter) -> bool:
    """Whether ``flt`` matches every point of ``collection`` (two exact counts, kept until
    the store is written: :func:`kbsync.store.memo.remember`). Then a search may leave it
    out: the engine's filtered scan of 100k chunks costs ~2x its plain one."""
    def count() -> bool:
        total = store.count(collection)
        return total > 0 and store.count(collection, flt) == total

    return remember(store, ("every point", collection, repr(flt)), count)


def _expansions(query: str, *, mqe: int, hyde: bool, llm, notes: list[str],
                budget_s: float | None = None) -> list[_Probe]:
    """The extra texts to search; every failure becomes a note and a warning. With
    ``budget_s`` the chat calls together end within it (:meth:`ChatClient.within
    <kbsync.query.llm.ChatClient.within>`; a stand-in model without ``within`` is
    called as is); once it is spent, what is left is skipped in the same note."""
    if not (mqe or hyde):
        return []
    if llm is None:
        _note(notes, "query expansion (mqe/hyde) skipped: no chat model configured "
                     "(set KBSYNC_LLM_MODEL); searched the plain query only")
        return []
    deadline = None if budget_s is None else time.monotonic() + budget_s
    asked = [name for name, wanted in (("mqe", mqe), ("hyde", hyde)) if wanted]
    probes: list[_Probe] = []
    for i, name in enumerate(asked):
        try:
            with _within(llm, deadline, budget_s):
                probes += _expand(name, query, mqe, llm, notes)
        except KbsyncError as exc:
            if deadline is not None and time.monotonic() >= deadline:
                skipped = " and ".join(asked[i:])
                _note(notes, f"{skipped} skipped: the chat model failed ({exc.kind}: {exc})")
                break
            _note(notes, f"{name} skipped: the chat model failed ({exc.kind}: {exc})")
    return probes


def _within(llm, deadline: float | None, budget_s: float | None):
    """The chat model's budget context (``contextlib.nullcontext`` without one)."""
    within = getattr(llm, "within", None)
    if deadline is None or budget_s is None or not callable(within):
        return contextlib.nullcontext()
    return within(deadline, budget_s)


def _expand(name: str, query: str, mqe: int, llm, notes: list[str]) -> list[_Probe]:
    """The probes of one expansion (``mqe`` or ``hyde``); a short answer adds a note.

    Raises:
        KbsyncError: the chat model failed (an ``LLMError`` kind).
    """
    if name == "mqe":
        texts = expand.rephrasings(llm, query, mqe)
        if len(texts) < mqe:
            _note(notes, f"mqe: the chat model gave {len(texts)} usable rephrasings of {mqe} asked")
        return [_Probe(t) for t in texts]
    passage = expand.hypothetical_passage(llm, query)
    if not passage:
        _note(notes, "hyde skipped: the chat model wrote an empty passage")
        return []
    return [_Probe(passage, passage=True)]


def _search_one(probe: _Probe, *, store: VectorStore, service: Embedder, collection: str,
                mode: SearchMode, limit: int, flt: Filter | None, notes: list[str],
                sparse: SparseEncoder) -> list[ScoredPoint] | None:
    """Candidates for one text; ``None`` when a HyDE passage could not be embedded."""
    if probe.passage:
        from kbsync.embed.base import TextKind

        try:  # within the query budget, as the query itself: a person waits
            vector = service.embed_query(probe.text, kind=TextKind.PASSAGE)
        except EmbeddingError as exc:
            notes.append("hyde skipped: the hypothetical passage could not be embedded "
                         f"({' '.join(str(exc).split())[:200]})")
            return None
    else:
        vector = service.embed_query(probe.text)
    if mode is SearchMode.DENSE:
        return store.search(collection, vector, limit=limit, flt=flt)
    sparse_query = sparse.encode_query(probe.text)
    weights = fusion_for(probe.text, provider=service.provider, model=service.model,
                         sparse=sparse.version)
    return hybrid_candidates(store, collection, vector, sparse_query, weights, limit=limit,
                             flt=flt, depth=max(limit, FUSION_DEPTH))


def hybrid_candidates(store: VectorStore, collection: str, vector: Sequence[float],
                      sparse_query: SparseVec, weights: Fusion, *, limit: int,
                      flt: Filter | None, depth: int) -> list[ScoredPoint]:
    """One dense and one sparse query (``depth`` candidates each), fused, best ``limit``.

    A store with ``payloads`` (the embedded one) fuses ids and scores and fetches the
    payloads of the ``limit`` kept only: 2 x FUSION_DEPTH payloads cost ~4x the searches.
    An empty sparse query leaves the dense list alone in the fusion.
    """
    fetch = getattr(store, "payloads", None)
    bare = {} if fetch is None else {"with_payload": False}
    dense = store.search(collection, vector, limit=depth, flt=flt, **bare)
    lexical = (store.sparse_search(collection, sparse_query, limit=depth, flt=flt, **bare)
               if sparse_query.indices else [])
    fused = fuse(dense, lexical, weights, limit=limit)
    return fused if fetch is None else with_payloads(fetch, collection, fused)


def with_payloads(fetch, collection: str, points: Sequence[ScoredPoint]) -> list[ScoredPoint]:
    """``points`` (in order) with the payloads ``fetch(collection, ids)`` finds; a point
    deleted since the search (no payload any more) is left out, as a search now would."""
    found = fetch(collection, [p.id for p in points])
    return [ScoredPoint(p.id, p.score, found[p.id]) for p in points if p.id in found]


def _note(notes: list[str], text: str) -> None:
    log.warning("search: %s", text)
    notes.append(text)


def keep(points: Sequence[ScoredPoint], *, min_score: float | None) -> list[ScoredPoint]:
    """Candidates above ``min_score`` with duplicate texts removed, best first."""
    seen: set[bytes] = set()
    kept = []
    for point in sorted(points, key=lambda p: p.score, reverse=True):
        if min_score is not None and point.score < min_score:
            continue
        digest = hashlib.sha256(" ".join(point.payload.get("text", "").split()).encode()).digest()
        if digest in seen:
            continue
        seen.add(digest)
        kept.append(point)
    return kept


def to_hit(rank: int, point: ScoredPoint) -> SearchHit:
    """A store hit as a result with its citation fields."""
    p = point.payload
    return SearchHit(rank=rank, score=round(float(point.score), 6), doc_id=p["doc_id"],
                     path=p.get("path", ""), chunk_index=int(p.get("chunk_index", 0)),
                     heading_path=p.get("heading_path", ""), page_start=p.get("page_start"),
                     page_end=p.get("page_end"), text=p.get("text", ""))


def citation(hit: SearchHit) -> str:
    """``[n] doc_id, p. 3-4, "Heading > Sub"`` (page and heading parts only when known)."""
    parts = [f"[{hit.rank}] {hit.doc_id}"]
    if hit.page_start is not None:
        pages = (f"{hit.page_start}" if hit.page_end in (None, hit.page_start)
                 else f"{hit.page_start}-{hit.page_end}")
        parts.append(f"p. {pages}")
    if hit.heading_path:
        parts.append(f'"{hit.heading_path}"')
    return ", ".join(parts)


def search_kb(
    query: str | SearchRequest,
    *,
    settings: Settings | None = None,
    store: VectorStore | None = None,
    service: Embedder | None = None,
    llm: ChatModel | None = None,
    collection: str | None = None,
    **options: Any,
) -> SearchResult:
    """Search with whatever is not given opened from the settings (``kbsync.search(...)``).

    ``query`` and ``options`` as for :func:`search` (a
    :class:`~kbsync.query.request.SearchRequest`, or the text with namespace, k, mode,
    mqe, hyde, min_score and the filters). ``settings`` defaults to ``load_settings()``
    (``KBSYNC_*`` variables); a store opened here is closed before returning (the embedded
    store locks its folder meanwhile: pass ``store`` to search repeatedly, or use
    ``kbsync.api``); the embedding service is the process-wide one for the settings;
    ``llm`` defaults to the configured chat model when ``mqe`` or ``hyde`` is asked (none
    configured: a note, the plain query is searched).

    Raises:
        as :func:`search`, plus ``StoreUnavailable`` when another process holds
        the embedded store.
    """
    request = as_request(query, **options)  # a bad option fails before anything opens
    from kbsync.settings import load_settings

    from kbsync.catalog.active import resolve

    # The collection a rebuild made active, with its own model (kbsync.catalog.active).
    settings = resolve(settings if settings is not None else load_settings(), store)
    if service is None:
        from kbsync.embed import build_embedding_service

        service = build_embedding_service(settings)
    if llm is None and (request.mqe or request.hyde):
        llm = chat_model(settings, optional=True)
    own_store = store is None
    if store is None:
        from kbsync.store import open_store

        store = open_store(settings)
    try:
        return search(request, store=store, service=service,
                      collection=collection or settings.collection, llm=llm)
    finally:
        if own_store:
            store.close()


class _CallableModule(types.ModuleType):
    """Makes ``kbsync.search(...)`` work although ``kbsync.query.search`` is this module."""

    def __call__(self, query: str | SearchRequest, **options: Any) -> SearchResult:
        return search_kb(query, **options)


sys.modules[__name__].__class__ = _CallableModule
