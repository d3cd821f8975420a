"""kbsync's first BM25 encoder (``bm25-v1``), kept for the collections built with it.

A collection records the sparse encoder it was built with (its embedder identity) and
keeps it: its chunks are written and its queries encoded with this module until it is
rebuilt (``kbsync rebuild``). New collections use :mod:`kbsync.text.sparse` (Qdrant's
BM25), which replaced this one by measurement (see that module). Do not change this
module: a change would alter the vectors of collections that already hold them.

A chunk's sparse vector holds BM25 *term-frequency* weights; Qdrant's IDF
modifier on the collection's sparse vector supplies the inverse document
frequency at query time, so a query's score against a chunk is

    sum over query terms t of  idf(t) * tf(t) * (k1 + 1) / (tf(t) + k1 * (1 - b + b * len / AVG_LEN))

which is BM25 with an *assumed* average chunk length. The same formula as
Qdrant's own ``Bm25`` model and fastembed's ``Qdrant/bm25`` (k1 1.2, b 0.75).

Choices (and why):

- **Saturation and length normalisation on the document side**, not plain tf:
  chunks range from a heading plus one line to ~400 model tokens, and with
  plain tf a long chunk that repeats a word beats the short chunk about it.
- **Assumed average length** (``AVG_LEN``) instead of the corpus mean: a
  stored vector must not depend on the rest of the corpus (it would go stale
  as documents come and go, and the same chunk would get different vectors in
  different namespaces). ``AVG_LEN`` = 160 terms: a full chunk under the
  default budget (400 model tokens) has about 230 terms here, and documents
  end in shorter chunks. (The small ``data/sample`` share averages 58 terms
  per chunk; a wrong guess only shifts how much length is penalised.)
- **Queries weigh 1.0 per unique term**: repeated query words add nothing, the
  IDF does the ranking.
- **English**: NFKC, lowercase, split on non-word characters. An identifier
  such as ``ERR_7Q4Z`` stays one token (``err_7q4z``) and also yields its
  underscore-separated parts, so both the whole code and its parts match.
  Lucene's 33 English stop words are dropped (the short list: "how", "what"
  and the like stay, IDF handles them). Light stemming is Harman's S-stemmer
  (plural endings only: "policies" -> "policy", "invoices" -> "invoice"),
  applied to purely alphabetic words of four letters or more: predictable,
  and it never mangles codes.
- **CJK** (Han, kana, hangul): runs have no spaces between words, so a run
  yields its overlapping character bigrams, and a run of one character its
  unigram (Lucene's CJKBigramFilter does the same). A query must therefore
  share a two-character sequence with a chunk to match it.
- **Hashing**: token -> blake2b -> 31-bit index. Stable across processes and
  machines (Python's ``hash()`` is salted), with no vocabulary to store. Two
  tokens can collide: with a vocabulary of V distinct tokens about
  ``V**2 / 2**32`` pairs share an index (about 230 pairs for a million
  tokens); a colliding pair behaves as one term (each matches the other's
  chunks, with a lower IDF). Within one text colliding tokens are merged by
  adding their weights, so indices stay unique.

``SPARSE_VERSION`` names this scheme: anything that changes which vector a
text gets must change it, so callers can put it in their fingerprints.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

from kbsync.models import SparseVec
from kbsync.text.bm25 import K1, Bm25Params  # K1: re-exported (the tests read it here)
from kbsync.text.cjk import CJK_WORD_CHARS, compiled

SPARSE_VERSION = "bm25-v1"
"""Changes whenever the tokeniser, hashing or weights change."""

AVG_LEN = 160.0
"""Assumed average chunk length, in tokens of this tokeniser (see module doc)."""

MAX_TOKEN_CHARS = 64  # longer "words" are base64 blobs, minified code or URLs glued together

_CJK = CJK_WORD_CHARS
# A CJK run, or a run of word characters that are not CJK (underscore included,
# so identifiers stay whole).
_TOKEN = rf"([{_CJK}]+)|([^\W{_CJK}]+)"  # compiled on first use (cjk.compiled)

STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their "
    "then there these they this to was will with".split()
)
"""Lucene's English stop set (``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET``)."""


@dataclass(frozen=True)
class SparseConfig(Bm25Params):
    """Tokeniser and BM25 settings (the defaults are what ``SPARSE_VERSION`` names).

    Attributes:
        k1, b, avg_len: as :class:`~kbsync.text.bm25.Bm25Params`.
        stem: apply the S-stemmer to alphabetic words.
        stop_words: drop ``STOP_WORDS``.
    """

    avg_len: float = AVG_LEN
    stem: bool = True
    stop_words: bool = True


DEFAULT = SparseConfig()


def s_stem(word: str) -> str:
    """Harman's S-stemmer: strip English plural endings (first matching rule only).

    ``-ies`` -> ``-y`` (not ``-eies``/``-aies``); ``-es`` -> ``-e`` (not
    ``-aes``/``-ees``/``-oes``); ``-s`` -> ``""`` (not ``-us``/``-ss``).
    Words under four letters and words with digits or underscores are kept.
    """
    if len(word) < 4 or not word.isalpha():
        return word
    if word.endswith("ies") and not word.endswith(("eies", "aies")):
        return word[:-3] + "y"
    if word.endswith("es") and not word.endswith(("aes", "ees", "oes")):
        return word[:-1]
    if word.endswith("s") and not word.endswith(("us", "ss")):
        return word[:-1]
    return word


def tokenize(text: str, config: SparseConfig = DEFAULT) -> list[str]:
    """The terms of ``text``, in order (repeats kept: they are the term frequencies).

    Invariants: deterministic; every term is non-empty, lowercase and at most
    ``MAX_TOKEN_CHARS`` characters; a CJK run of n >= 2 characters yields
    n - 1 bigrams, a single CJK character one unigram.
    """
    terms: list[str] = []
    for match in compiled(_TOKEN).finditer(unicodedata.normalize("NFKC", text).lower()):
        cjk, word = match.groups()
        if cjk is not None:
            if len(cjk) == 1:
                terms.append(cjk)
            else:
                terms.extend(cjk[i:i + 2] for i in range(len(cjk) - 1))
            continue
        for term in _word_terms(word):
            if len(term) > MAX_TOKEN_CHARS or (config.stop_words and term in STOP_WORDS):
                continue
            terms.append(s_stem(term) if config.stem else term)
    return terms


def _word_terms(word: str) -> list[str]:
    """A word, plus the parts of an identifier joined by underscores."""
    if "_" not in word:
        return [word]
    parts = [p for p in word.split("_") if p]
    whole = word.strip("_")
    if not whole:
        return []
    return [whole] + parts if len(parts) > 1 else [whole]


@lru_cache(maxsize=262144)
def token_index(term: str) -> int:
    """The sparse index of ``term``: the first 31 bits of its blake2b digest.

    31 bits (not Qdrant's 32) keep indices positive in any signed 32-bit consumer.
    """
    digest = hashlib.blake2b(term.encode("utf-8"), digest_size=4).digest()
    return int.from_bytes(digest, "little") & 0x7FFFFFFF


def _to_vec(weights: dict[int, float]) -> SparseVec:
    indices = sorted(weights)
    return SparseVec(indices, [weights[i] for i in indices])


def encode_document(text: str, config: SparseConfig = DEFAULT) -> SparseVec:
    """The BM25 document vector of ``text`` (empty when it has no term).

    Each term's weight is ``tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avg_len))``
    with ``len`` the number of terms; all weights are positive and below ``k1 + 1``.
    """
    terms = tokenize(text, config)
    if not terms:
        return SparseVec([], [])
    norm = config.k1 * (1.0 - config.b + config.b * len(terms) / config.avg_len)
    weights: dict[int, float] = {}
    for term, tf in Counter(terms).items():
        index = token_index(term)
        weights[index] = weights.get(index, 0.0) + tf * (config.k1 + 1.0) / (tf + norm)
    return _to_vec(weights)


def encode_query(text: str, config: SparseConfig = DEFAULT) -> SparseVec:
    """The query vector of ``text``: weight 1.0 per unique term (empty when none)."""
    return _to_vec({token_index(term): 1.0 for term in tokenize(text, config)})
