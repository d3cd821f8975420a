"""BM25 sparse vectors for hybrid search, through Qdrant's own BM25 model (qdrant-edge-py).

A chunk's sparse vector holds BM25 *term-frequency* weights; Qdrant's IDF modifier on
the collection's sparse vector supplies the inverse document frequency at query time,
so a query's score against a chunk is

    sum over query terms t of  idf(t) * tf(t) * (k + 1) / (tf(t) + k * (1 - b + b * len / avg_len))

which is BM25 with an *assumed* average chunk length. Both store adapters (the
embedded engine and a Qdrant server through qdrant-client) get the vectors made here,
in kbsync's process, so their tokenisation and results agree.

Choices (and why), measured on the labelled sets in ``data/eval`` with
``tests/bench/bm25_bench.py`` (same chunks, nDCG@10 English / Chinese):

- **Qdrant's BM25** (``qdrant_edge.Bm25``) over kbsync's former hand-written encoder
  (English words with an S-stemmer, CJK character bigrams): 0.655 / 0.770 against
  0.568 / 0.757 at the same chunks.
- **The Multilingual tokenizer** (word segmentation for Chinese and Japanese, words
  elsewhere) with the English stop words and Snowball stemmer: one tokenisation for
  every language. The plain English tokenizer loses Chinese entirely (0.134), and
  turning stemming and stop words off costs English 0.06.
- **Assumed average length** 50 tokens (Qdrant's default is 256): a stored vector must
  not depend on the rest of the corpus, so the length a chunk is normalised against is
  fixed. Shorter assumed lengths penalise long chunks more, which these sets reward:
  English 0.602 / 0.635 / 0.647 / 0.655 / 0.656 at 256 / 100 / 75 / 50 / 35; Chinese
  peaks at 50-100 (0.770-0.772) and falls at 25 (0.741).
- **Tokens over 64 characters are dropped**: base64 blobs, minified code, glued URLs.
- **Queries weigh 1.0 per unique term**: repeated query words add nothing.

Indices are Qdrant's own token hashes (32-bit); two tokens can collide and then behave
as one term. ``SPARSE_VERSION`` names the scheme; qdrant-edge-py is pinned, and
``tests/query/test_sparse.py`` holds the exact vectors of an English and a Chinese text,
so an upgrade that changed a token's hash or segmentation fails there first (then the
scheme needs a new version, and the old one stays for the collections built with it).

**One encoder per collection.** A collection records the sparse encoder it was built
with (:mod:`kbsync.catalog.identity`) and keeps it: :func:`encoder_for` gives the
encoder of a recorded version, this module's for new collections and
:mod:`kbsync.text.sparse_v1` for those built before it. Changing a collection's
encoder goes through ``kbsync rebuild``, like a model change.

Thread safety: the model is immutable once built and its calls are made under the GIL,
so one instance serves every thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import qdrant_edge as qe

from kbsync.errors import UsageError
from kbsync.models import SparseVec
from kbsync.text import sparse_v1
from kbsync.text.bm25 import K1, Bm25Params  # K1: re-exported (the tests read it here)
from kbsync.text.cjk import count_cjk

AVG_LEN = 50.0
"""Assumed average chunk length, in tokens of the tokenizer (see module doc)."""

MAX_TOKEN_CHARS = 64


@dataclass(frozen=True)
class SparseConfig(Bm25Params):
    """BM25 settings (:class:`~kbsync.text.bm25.Bm25Params`); the defaults are what
    ``SPARSE_VERSION`` names."""

    avg_len: float = AVG_LEN


DEFAULT = SparseConfig()

SPARSE_VERSION = "qdrant-bm25-multi-v1"
"""Changes whenever the tokeniser, hashing or weights change (see module doc)."""


@lru_cache(maxsize=8)
def _model(config: SparseConfig) -> qe.Bm25:
    return qe.Bm25(qe.Bm25Config(k=config.k1, b=config.b, avg_len=config.avg_len,
                                 tokenizer=qe.TokenizerType.Multilingual,
                                 language="english", max_token_len=MAX_TOKEN_CHARS))


def _to_vec(vector: qe.SparseVector) -> SparseVec:
    """Sorted, unique indices (the engine's order is not promised)."""
    pairs = sorted(zip(vector.indices, vector.values))
    return SparseVec([i for i, _ in pairs], [float(v) for _, v in pairs])


def encode_document(text: str, config: SparseConfig = DEFAULT) -> SparseVec:
    """The BM25 document vector of ``text`` (empty when it has no term).

    Each term's weight is ``tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avg_len))``
    with ``len`` the number of terms; all weights are positive and below ``k1 + 1``.
    """
    return _to_vec(_model(config).embed_document(text))


def encode_query(text: str, config: SparseConfig = DEFAULT) -> SparseVec:
    """The query vector of ``text``: weight 1.0 per unique term (empty when none)."""
    return _to_vec(_model(config).embed_query(text))


def term_bound(text: str) -> int:
    """Upper estimate of the entries of ``text``'s sparse vector, whatever the scheme:
    whitespace words plus CJK characters (the disk-space check budgets with it)."""
    return len(text.split()) + count_cjk(text)


@dataclass(frozen=True)
class SparseEncoder:
    """One BM25 scheme: its version (recorded by collections) and its two encoders."""

    version: str
    encode_document: Callable[[str], SparseVec]
    encode_query: Callable[[str], SparseVec]


CURRENT = SparseEncoder(SPARSE_VERSION, encode_document, encode_query)
"""What new collections are built with."""

LEGACY = SparseEncoder(sparse_v1.SPARSE_VERSION, sparse_v1.encode_document,
                       sparse_v1.encode_query)
"""What collections built before :data:`CURRENT` hold (and every collection that
records no embedder: the identity record came after it)."""

_KNOWN = {e.version: e for e in (CURRENT, LEGACY)}


def encoder_for(version: str) -> SparseEncoder:
    """The encoder of a recorded sparse version.

    Raises:
        UsageError: a version this kbsync does not know (a collection written by a
            newer release): writing or querying it with another scheme would match
            nothing, so it is refused.
    """
    try:
        return _KNOWN[version]
    except KeyError:
        raise UsageError(f"this collection's sparse vectors were made by the {version!r} "
                         f"encoder, which this kbsync does not know (it knows "
                         f"{', '.join(sorted(_KNOWN))}): upgrade kbsync") from None
