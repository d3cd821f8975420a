"""Retrieval evaluation over a labelled query set: parse, search per mode, score, aggregate.

Plain core code (no Prefect): the one evaluate sequence (:mod:`kbsync.eval.sequence`)
chains these functions, as Prefect tasks in ``flows/evaluate.py`` and in process in
:func:`kbsync.eval.plain.evaluate_plain`.

Query files are parsed by :mod:`kbsync.eval.queries` (re-exported here). A
query with an empty ``relevant`` list is searched and counted (raw/kept counts,
latency) but left out of the quality means.

Modes are those of :class:`kbsync.query.search.SearchMode` (``dense``, ``hybrid``),
optionally with query expansion by the chat model: ``dense+mqe3``, ``hybrid+hyde``,
``dense+mqe2+hyde``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, Sequence

from kbsync.eval import metrics as m
from kbsync.errors import UsageError
from kbsync.eval.queries import EvalQuery, load_queries, queries_hash
from kbsync.query.expand import MAX_MQE
from kbsync.query.filters import NO_FILTERS, SearchFilters
from kbsync.query.llm import ChatModel
from kbsync.query.request import MAX_K, SearchMode, SearchRequest

if TYPE_CHECKING:  # the types only
    from kbsync.catalog.state import StateStore
    from kbsync.embed.base import Embedder
    from kbsync.settings import Settings
    from kbsync.store.base import VectorStore

log = logging.getLogger(__name__)

__all__ = ["EvalQuery", "EvalResult", "ModeSpec", "QueryOutcome", "SearchRuntime",
           "aggregate", "build_result", "check_labels", "labels_in", "load_queries",
           "parse_modes", "queries_hash", "run_mode"]

NDCG_CUTOFF = 10
MAX_SEARCH_K = MAX_K  # kbsync.query.search.search refuses more
DEFAULT_MQE = 3
METRIC_KEYS = ("hit_rate", "mrr", "ndcg@10", "recall@k")


@dataclass(frozen=True)
class ModeSpec:
    """A retrieval configuration to evaluate, parsed from ``dense``, ``hybrid+mqe3``, ...

    Attributes:
        name: the spec as given (the key in ``modes`` of the result).
        mode: the search mode (``dense`` or ``hybrid``).
        mqe: number of LLM rephrasings (0 = none).
        hyde: add an LLM-written hypothetical answer passage.
    """

    name: str
    mode: str = "dense"
    mqe: int = 0
    hyde: bool = False

    def request(self, query: str, *, namespace: str, k: int,
                filters: SearchFilters = NO_FILTERS) -> SearchRequest:
        """The search of ``query`` under this mode.

        ``mode`` is always this spec's: leaving it to the request's default meant hybrid,
        so a "dense" column measured hybrid (tests/eval/test_modes_run_what_they_name.py).
        """
        return SearchRequest(query=query, namespace=namespace, k=k, mode=SearchMode(self.mode),
                             mqe=self.mqe, hyde=self.hyde, filters=filters)

    @property
    def needs_llm(self) -> bool:
        """True when the spec asks for query expansion."""
        return bool(self.mqe or self.hyde)


@dataclass
class QueryOutcome:
    """One query under one mode: a row of the per-query CSV."""

    mode: str
    line: int
    query: str
    relevant: list[str]
    top_docs: list[str]
    first_relevant_rank: int | None
    hit: float | None
    mrr: float | None
    ndcg10: float | None
    recall: float | None
    raw_count: int
    kept_count: int
    latency_ms: float
    notes: str = ""

    def to_row(self) -> dict[str, Any]:
        """Flat form for the CSV and the table artifact (lists joined with ``|``)."""
        row = asdict(self)
        row["relevant"] = "|".join(self.relevant)
        row["top_docs"] = "|".join(self.top_docs)
        return row


# --- modes --------------------------------------------------------------------------------------
_SPEC = re.compile(r"^(?P<mode>[a-z]+)(?P<opts>(\+(mqe\d*|hyde))*)$")


def supported_search() -> tuple[set[str], set[str]]:
    """The search modes (:class:`kbsync.query.request.SearchMode`) and expansion options."""
    return {m.value for m in SearchMode}, {"mqe", "hyde"}


def parse_modes(names: Sequence[str]) -> list[ModeSpec]:
    """Parse and check mode specs.

    Raises:
        UsageError: empty list, duplicates, bad syntax, or a mode/option the
            search function does not support (yet).
    """
    cleaned = [n.strip().lower() for n in names if n and n.strip()]
    if not cleaned:
        raise UsageError("no retrieval mode given (e.g. --modes dense,hybrid)")
    if len(set(cleaned)) != len(cleaned):
        raise UsageError(f"a mode is listed twice in {cleaned}")
    modes, options = supported_search()
    specs = []
    for name in cleaned:
        match = _SPEC.match(name)
        if not match:
            raise UsageError(f"bad mode {name!r}: expected MODE[+mqeN][+hyde], e.g. dense+mqe3")
        if match["mode"] not in modes:
            raise UsageError(f"unknown search mode {match['mode']!r} in {name!r}; "
                             f"this version supports: {', '.join(sorted(modes))}")
        mqe, hyde = 0, False
        for opt in filter(None, match["opts"].split("+")):
            key = "hyde" if opt == "hyde" else "mqe"
            if key not in options:
                raise UsageError(f"{name!r}: search does not support {key} in this version")
            if key == "hyde":
                hyde = True
            else:
                mqe = int(opt[3:] or DEFAULT_MQE)
                if not 1 <= mqe <= MAX_MQE:
                    raise UsageError(f"{name!r}: mqe takes 1 to {MAX_MQE} rephrasings")
        specs.append(ModeSpec(name=name, mode=match["mode"], mqe=mqe, hyde=hyde))
    return specs


def search_depth(k: int) -> int:
    """Chunks requested per query: as many as search allows (100).

    Documents are ranked by their best chunk, and one long document can fill
    dozens of the top chunks; fetching 3 chunks per wanted document left only
    7-8 distinct documents in the top 30 on data/sample. So raw/kept counts and
    latency in evaluation reports are for a 100-chunk search, not the CLI's k=5.
    """
    return MAX_SEARCH_K


# --- running ------------------------------------------------------------------------------------
def check_labels(queries: Sequence[EvalQuery], known: set[str], namespace: str) -> list[str]:
    """Warnings for labelled doc_ids that the namespace does not hold (typos, missing ingest).

    Raises:
        UsageError: the namespace holds no document at all.
    """
    if not known:
        raise UsageError(f"namespace {namespace!r} holds no documents: run `kbsync ingest` "
                         "first, or pass the namespace the queries were written for")
    warnings = []
    for q in queries:
        for doc_id in q.relevant:
            if doc_id not in known:
                warnings.append(f"line {q.line}: relevant doc_id {doc_id!r} is not in "
                                f"namespace {namespace!r}")
    return warnings


class SearchRuntime(Protocol):
    """What evaluation reads of a runtime (:class:`kbsync.runtime.Runtime` is one; the eval
    wing sits below it, so it names only what it uses)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def store(self) -> VectorStore: ...

    @property
    def states(self) -> StateStore: ...

    @property
    def service(self) -> Embedder: ...

    @property
    def collection(self) -> str: ...

    def embedding_info(self) -> dict: ...


def labels_in(queries: Sequence[EvalQuery], runtime: SearchRuntime,
              namespace: str) -> list[str]:
    """:func:`check_labels` against the documents ``runtime``'s state records hold."""
    return check_labels(queries, set(runtime.states.load(namespace)), namespace)


def run_mode(
    queries: Sequence[EvalQuery], spec: ModeSpec, *, runtime: SearchRuntime, namespace: str,
    k: int, llm: ChatModel | None = None, warm_up: bool = True,
    filters: dict[str, Any] | None = None,
) -> list[QueryOutcome]:
    """Search every query under one mode and score the document ranking.

    ``filters`` (root, path_prefix, types, modified_since: the JSON form of
    :class:`kbsync.query.filters.SearchFilters`) narrow every search.

    Raises:
        UsageError: the mode expands queries but ``llm`` is ``None``.

    Documents are ranked by their best chunk among ``search_depth(k)`` chunks.
    Every query is embedded once and one unrecorded search runs before timing
    (see the comment below): reported latency excludes query-embedding time.
    """
    from kbsync.query.search import search

    if spec.needs_llm and llm is None:
        # search would quietly fall back to the plain query: refuse instead
        raise UsageError(f"mode {spec.name!r} needs a chat model (KBSYNC_LLM_MODEL)")
    narrowed = SearchFilters.build(**(filters or {}))
    depth = search_depth(k)

    def run(text: str):
        return search(spec.request(text, namespace=namespace, k=depth, filters=narrowed),
                      store=runtime.store, service=runtime.service,
                      collection=runtime.collection, llm=llm if spec.needs_llm else None)

    if warm_up and queries:
        # Query vectors come from the embedding cache once computed, so the first mode of
        # the first run would pay model time that later modes and runs do not. Embedding
        # every query first makes latency comparable: it is retrieval time (cache lookup,
        # store search, fusion, de-duplication, plus any LLM expansion), not model time.
        for q in queries:
            runtime.service.embed_query(q.query)
        run(queries[0].query)
    outcomes = []
    for q in queries:
        result = run(q.query)
        relevant = set(q.relevant)
        ranked = m.rank_documents(result.results, relevant)
        # search reports fallbacks (e.g. the chat model failed for MQE): keep them per query.
        notes = "; ".join(result.notes)
        outcomes.append(QueryOutcome(
            mode=spec.name, line=q.line, query=q.query, relevant=list(q.relevant),
            top_docs=ranked[:k], first_relevant_rank=m.first_relevant_rank(ranked, relevant),
            hit=m.hit_at_k(ranked, relevant, k), mrr=m.mrr_at_k(ranked, relevant, k),
            ndcg10=m.ndcg_at_k(ranked, relevant, NDCG_CUTOFF),
            recall=m.recall_at_k(ranked, relevant, k), raw_count=result.raw_count,
            kept_count=result.kept_count, latency_ms=float(result.latency_ms), notes=notes))
    return outcomes


def aggregate(outcomes: Sequence[QueryOutcome]) -> dict[str, dict[str, Any]]:
    """Per-mode means (quality over labelled queries only) and latency percentiles.

    Returns:
        ``{mode: {hit_rate, mrr, ndcg@10, recall@k, raw_count_mean, kept_count_mean,
        latency_ms_p50, latency_ms_p95, queries, scored}}`` in the order modes first appear.
    """
    import pandas as pd

    frame = pd.DataFrame([asdict(o) for o in outcomes])
    result: dict[str, dict[str, Any]] = {}
    if frame.empty:
        return result
    for mode in dict.fromkeys(frame["mode"]):
        part = frame[frame["mode"] == mode]
        scored = part.dropna(subset=["hit"])

        def mean(column: str, data=scored) -> float | None:
            value = pd.to_numeric(data[column], errors="coerce").mean()
            return None if pd.isna(value) else round(float(value), 4)

        result[mode] = {
            "hit_rate": mean("hit"), "mrr": mean("mrr"), "ndcg@10": mean("ndcg10"),
            "recall@k": mean("recall"),
            "raw_count_mean": mean("raw_count", part), "kept_count_mean": mean("kept_count", part),
            "latency_ms_p50": round(float(part["latency_ms"].quantile(0.5)), 2),
            "latency_ms_p95": round(float(part["latency_ms"].quantile(0.95)), 2),
            "queries": int(len(part)), "scored": int(len(scored)),
        }
    return result


@dataclass
class EvalResult:
    """The JSON contract of ``kbsync eval --json`` (plus the rows behind it).

    Invariant: ``modes`` has one entry per requested mode, in request order.
    """

    queries: int
    k: int
    namespace: str
    modes: dict[str, dict[str, Any]]
    report: dict[str, Any] = field(default_factory=dict)
    regression: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    embedding: dict[str, Any] = field(default_factory=dict)
    queries_hash: str = ""
    filters: dict[str, Any] = field(default_factory=dict)  # as search echoes them
    outcomes: list[QueryOutcome] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (per-query rows are in the CSV, not here)."""
        data = asdict(self)
        data.pop("outcomes")
        return data

    @property
    def gate_ok(self) -> bool:
        """False when the regression gate tripped and the drop was not accepted."""
        return bool(self.regression.get("passed", True) or self.regression.get("accepted"))


def check_k(k: int) -> None:
    """k counts ranked documents: 1..100."""
    if not 1 <= k <= MAX_SEARCH_K:
        raise UsageError(f"k must be between 1 and {MAX_SEARCH_K}, got {k}")


def build_result(queries: Sequence[EvalQuery], outcomes: Sequence[QueryOutcome], *, k: int,
                 namespace: str, warnings: Sequence[str] = (),
                 embedding: dict | None = None,
                 filters: dict[str, Any] | None = None) -> EvalResult:
    """Aggregate outcomes into an :class:`EvalResult` (report and gate not filled yet).

    With active ``filters`` the queries hash covers them too, so the regression
    gate compares a filtered run only with runs under the same filters.
    """
    for warning in warnings:
        log.warning("%s", warning)
    applied = SearchFilters.build(**(filters or {})).to_dict()
    unscored = sum(1 for q in queries if not q.relevant)
    notes = list(warnings)
    if unscored:
        notes.append(f"{unscored} queries have no relevant documents: counted for raw/kept "
                     "and latency, left out of the quality means")
    return EvalResult(queries=len(queries), k=k, namespace=namespace, modes=aggregate(outcomes),
                      warnings=notes, embedding=dict(embedding or {}),
                      queries_hash=_run_hash(queries, applied), outcomes=list(outcomes),
                      filters=applied)


def _run_hash(queries: Sequence[EvalQuery], filters: dict[str, Any] | None) -> str:
    """The queries hash, extended by the filters when any is set (unfiltered runs keep theirs)."""
    base = queries_hash(queries)
    active = {k: v for k, v in (filters or {}).items() if v not in (None, [], ())}
    if not active:
        return base
    data = json.dumps([base, active], sort_keys=True, default=str)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()[:16]
