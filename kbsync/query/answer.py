"""``kbsync ask``: retrieve, then let a chat model answer only from the retrieved chunks.

Invariants:

- when no retrieved chunk scores at least ``min_score``, the answer says so and
  the chat model is never called (no cost, no invented answer);
- the model sees the passages numbered ``[1]..[n]`` and is told to cite them;
  every citation in the returned answer refers to one of those passages: a
  number the model invented is removed from the text and listed in
  ``invented_citations``;
- ``citations`` lists the passages the answer actually cites, in order of first
  mention.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Sequence

from kbsync.models import SearchHit
from kbsync.query.filters import SearchFilters
from kbsync.query.llm import ChatModel
from kbsync.query.request import SearchMode, SearchRequest, as_request
from kbsync.query.search import citation, search
from kbsync.store.base import VectorStore

if TYPE_CHECKING:  # the type only
    from kbsync.embed.base import Embedder

log = logging.getLogger(__name__)

DEFAULT_MIN_SCORE = 0.3
"""Cosine similarity below which a chunk is not worth answering from.

Measured on data/sample with all-MiniLM-L6-v2 (the default local model): the
best chunk of the 31 labelled queries scored 0.32-0.73, and 11 off-topic English
questions ("Who wrote Hamlet?") scored at most 0.28. That model is English-only:
an off-topic Chinese question can still score 0.69, so the threshold does not
protect Chinese. Other embedders need their own value (``--min-score``); the
hash embedder's scores are lower.
"""
MAX_CONTEXT_CHARS = 16_000
ANSWER_MAX_TOKENS = 700

SYSTEM_PROMPT = """You answer questions using only the numbered passages you are given.
Rules:
- Use only facts stated in the passages. Do not use outside knowledge.
- Cite the passage after each statement with its number in square brackets, e.g. [1] or [2][3].
  Cite only numbers that appear in the passages.
- If the passages do not contain the answer, say that the knowledge base does not answer it.
- Answer in the language of the question, briefly."""

_CITE = re.compile(r"\s?\[(\s*\d+\s*(?:[,;]\s*\d+\s*)*)\]")


@dataclass(frozen=True)
class Citation:
    """A passage the answer cites as ``[n]``."""

    n: int
    doc_id: str
    page_start: int | None
    page_end: int | None
    heading_path: str


@dataclass
class Answer:
    """The JSON contract of ``kbsync ask --json``: the answer plus the search fields."""

    query: str
    namespace: str
    mode: str
    answer: str
    answered: bool
    citations: list[Citation]
    raw_count: int
    kept_count: int
    results: list[SearchHit]
    latency_ms: float
    answer_latency_ms: float = 0.0
    min_score: float | None = None
    context_used: int = 0
    invented_citations: list[int] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    filters: dict = field(default_factory=lambda: SearchFilters().to_dict())

    def to_dict(self) -> dict:
        """JSON form."""
        data = asdict(self)
        data["results"] = [h.to_dict() for h in self.results]
        return data


def nothing_found(namespace: str) -> str:
    """The fixed reply when retrieval found nothing relevant."""
    return (f"I found nothing relevant to this question in namespace {namespace!r}, so I "
            "cannot answer it from the knowledge base.")


def ask(
    question: str | SearchRequest, *, store: VectorStore, service: Embedder, collection: str,
    llm: ChatModel, max_context_chars: int = MAX_CONTEXT_CHARS, **options: Any,
) -> Answer:
    """Answer a question from the ``k`` best chunks of its namespace, with citations.

    Args:
        question: a :class:`~kbsync.query.request.SearchRequest` (its ``query`` is the
            question; its ``mode`` is not used, and it asks for no ``mqe``/``hyde``), or the
            question with ``options``, the keywords of :meth:`SearchRequest.build
            <kbsync.query.request.SearchRequest.build>` (namespace, k, min_score, and the
            filters root, path_prefix, types, modified_since); in that form ``min_score``
            defaults to :data:`DEFAULT_MIN_SCORE`.
        store, service, collection: as for :func:`kbsync.query.search.search`.
        llm: the chat model; not called when nothing relevant is found.
        max_context_chars: passages beyond this many characters are left out.

    The request's ``min_score`` is the relevance threshold of the passages given to the
    model (``None``: no threshold); the filters are echoed in ``filters``, and a note of
    the search (e.g. about chunks the filters cannot see) becomes a warning.

    Raises:
        ValueError: blank question or bad k (from search); a request with mqe or hyde.
        TypeError: ``mode``, ``mqe`` or ``hyde`` among ``options``.
        UsageError: a malformed filter value.
        KbsyncError: the store or the chat model failed (never an empty answer).
    """
    if isinstance(question, str):
        unused = sorted(set(options) & {"mode", "mqe", "hyde"})
        if unused:
            raise TypeError(f"ask does not take {', '.join(unused)}: it searches the plain "
                            "question, dense")
        options.setdefault("min_score", DEFAULT_MIN_SCORE)
    request = as_request(question, **options)
    if request.mqe or request.hyde:
        raise ValueError("ask searches the plain question: a request with mqe or hyde "
                         "would be answered without them")
    min_score = request.min_score
    # Dense on purpose, every candidate kept: min_score is a cosine threshold applied to
    # the passages below, meaningless for fused scores.
    result = search(replace(request, mode=SearchMode.DENSE, min_score=None),
                    store=store, service=service, collection=collection)
    namespace = request.namespace
    context = _context(result.results, min_score, max_context_chars)
    answer = Answer(query=request.query, namespace=namespace, mode=result.mode, answer="",
                    answered=False, citations=[], raw_count=result.raw_count,
                    kept_count=result.kept_count, results=result.results,
                    latency_ms=result.latency_ms, min_score=min_score,
                    context_used=len(context), warnings=list(result.notes),
                    filters=result.filters)
    if not context:
        answer.answer = nothing_found(namespace)
        return answer
    started = time.perf_counter()
    reply = llm.complete(SYSTEM_PROMPT, user_prompt(request.query, context),
                         max_tokens=ANSWER_MAX_TOKENS, temperature=0.0)
    answer.answer_latency_ms = round((time.perf_counter() - started) * 1000, 2)
    text, cited, invented = check_citations(reply, len(context))
    answer.answer, answer.answered, answer.invented_citations = text.strip(), True, invented
    answer.citations = [Citation(n=n, doc_id=context[n - 1].doc_id,
                                 page_start=context[n - 1].page_start,
                                 page_end=context[n - 1].page_end,
                                 heading_path=context[n - 1].heading_path) for n in cited]
    if invented:
        answer.warnings.append(f"removed citations to passages that do not exist: {invented}")
        log.warning("the model cited passages that do not exist: %s", invented)
    if not cited:
        answer.warnings.append("the answer cites no passage")
    return answer


def _context(hits: Sequence[SearchHit], min_score: float | None,
             max_chars: int) -> list[SearchHit]:
    """The hits worth answering from, best first, within the character budget."""
    kept: list[SearchHit] = []
    used = 0
    for hit in hits:
        if min_score is not None and hit.score < min_score:
            continue
        if kept and used + len(hit.text) > max_chars:
            log.info("context budget reached: %d of %d passages used", len(kept), len(hits))
            break
        kept.append(hit)
        used += len(hit.text)
    return kept


def user_prompt(question: str, context: Sequence[SearchHit]) -> str:
    """The numbered passages, then the question."""
    blocks = []
    for n, hit in enumerate(context, 1):
        header = citation(replace(hit, rank=n))
        blocks.append(f"{header}\n{hit.text.strip()}")
    return "Passages:\n\n" + "\n\n".join(blocks) + f"\n\nQuestion: {question.strip()}"


def check_citations(text: str, passages: int) -> tuple[str, list[int], list[int]]:
    """Keep only citations ``[n]`` with ``1 <= n <= passages``.

    ``[1, 9]`` becomes ``[1]``; ``[9]`` alone is removed with its leading space.

    Returns:
        The cleaned text, cited numbers in order of first mention, invented numbers (sorted).
    """
    cited: dict[int, None] = {}
    invented: set[int] = set()

    def fix(match: re.Match) -> str:
        numbers = [int(x) for x in re.split(r"[,;]", match.group(1))]
        good = [n for n in numbers if 1 <= n <= passages]
        invented.update(n for n in numbers if not 1 <= n <= passages)
        cited.update(dict.fromkeys(good))
        if not good:
            return ""
        lead = " " if match.group(0).startswith(" ") else ""
        return lead + "[" + ", ".join(str(n) for n in good) + "]"

    return _CITE.sub(fix, text), list(cited), sorted(invented)

