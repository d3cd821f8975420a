"""Query expansion with a chat model: MQE (rephrasings) and HyDE (a hypothetical answer).

- **MQE** (multi-query expansion): the model writes ``n`` rephrasings of the
  query *in the query's own language*, one per line. Replies are parsed
  defensively: list markers and numbering (``1.``, ``2)``, ``-``, ``•``,
  ``（1）``) and wrapping quotes are stripped; blank lines, preambles ending in
  a colon, and duplicates (of the query or of each other, compared
  case-insensitively with whitespace collapsed) are dropped; at most ``n`` are
  kept.
- **HyDE** (hypothetical document embeddings): the model writes a short
  passage that would answer the query; the passage is embedded as a
  *passage*, so it lands where answering chunks are.

Functions here raise the model's own errors (``kbsync.errors.LLMError``);
:mod:`kbsync.query.search` turns a failure into a fallback with a note.
"""

from __future__ import annotations

import re

from kbsync.query.llm import ChatModel

MAX_MQE = 10
MQE_TEMPERATURE = 0.3  # some variety between rephrasings, little invention
HYDE_MAX_TOKENS = 256

MQE_SYSTEM = (
    "You rewrite search queries for a document search engine. Write {n} different "
    "rephrasings of the user's query. Use the same language as the query (a Chinese query "
    "gets Chinese rephrasings). Keep names, error codes, identifiers and numbers exactly as "
    "written. Output one rephrasing per line: no numbering, no quotes, no commentary."
)
HYDE_SYSTEM = (
    "Write a short passage, at most 120 words, that answers the user's question as a page of "
    "internal documentation would. Use the same language as the question. Keep names, error "
    "codes, identifiers and numbers exactly as written. Output only the passage."
)

# A list marker at the start of a line: bullets, "1." / "2)" / "3:" before a space
# (so "3.5 release notes" keeps its number), "1、" / "2：" (CJK), "(3)" / "（3）", "a)".
_MARKER = re.compile(
    r"^\s*(?:[-*•·]+|\d{1,2}[.):](?=\s)|\d{1,2}[、：]|[（(]\d{1,2}[)）]|[a-zA-Z][.)](?=\s))\s*"
)
_QUOTES = "\"'“”‘’「」『』`"


def _key(text: str) -> str:
    return " ".join(text.casefold().split())


def parse_rephrasings(reply: str, query: str, n: int) -> list[str]:
    """Up to ``n`` distinct rephrasings from a model reply (see module doc).

    Invariants: no result is blank, equal to the query, or equal to another
    result (case and whitespace ignored); order is the reply's.
    """
    seen = {_key(query)}
    out: list[str] = []
    for line in reply.splitlines():
        text = _MARKER.sub("", line, count=1).strip().strip(_QUOTES).strip()
        if not text or text.endswith((":", "：")):
            continue
        key = _key(text)
        if key in seen:
            continue
        seen.add(key)
        out.append(text)
        if len(out) == n:
            break
    return out


def rephrasings(llm: ChatModel, query: str, n: int) -> list[str]:
    """``n`` (or fewer, after parsing) rephrasings of ``query`` written by ``llm``.

    Raises:
        ValueError: ``n`` outside 1..``MAX_MQE``.
        LLMError: the model failed (from ``llm.complete``).
    """
    if not 1 <= n <= MAX_MQE:
        raise ValueError(f"mqe must be between 1 and {MAX_MQE}, got {n}")
    reply = llm.complete(MQE_SYSTEM.format(n=n), query, max_tokens=48 + 64 * n,
                         temperature=MQE_TEMPERATURE)
    return parse_rephrasings(reply, query, n)


def hypothetical_passage(llm: ChatModel, query: str) -> str:
    """A short passage answering ``query``, written by ``llm`` (stripped; may be empty).

    Raises:
        LLMError: the model failed (from ``llm.complete``).
    """
    return llm.complete(HYDE_SYSTEM, query, max_tokens=HYDE_MAX_TOKENS, temperature=0.0).strip()
