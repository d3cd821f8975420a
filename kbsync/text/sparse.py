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
as one term. ``SPARSE_VERSION`` names the scheme *and* the qdrant-edge-py release that
computes it, so an upgrade that could change a token's hash or segmentation enters
document fingerprints and reprocesses (the embedding cache keeps that cheap).

Thread safety: the model is immutable once built and its calls are made under the GIL,
so one instance serves every thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import version

import qdrant_edge as qe

from kbsync.store.base import SparseVec

K1 = 1.2
B = 0.75
AVG_LEN = 50.0
"""Assumed average chunk length, in tokens of the tokenizer (see module doc)."""

MAX_TOKEN_CHARS = 64


@dataclass(frozen=True)
class SparseConfig:
    """BM25 settings (the defaults are what ``SPARSE_VERSION`` names).

    Attributes:
        k1: term-frequency saturation (0 = binary weights).
        b: length normalisation (0 = none, 1 = full).
        avg_len: assumed average document length in tokens (> 0).
    """

    k1: float = K1
    b: float = B
    avg_len: float = AVG_LEN

    def __post_init__(self) -> None:
        if self.k1 < 0 or not 0.0 <= self.b <= 1.0 or self.avg_len <= 0:
            raise ValueError(f"bad BM25 parameters: k1={self.k1}, b={self.b}, "
                             f"avg_len={self.avg_len}")


DEFAULT = SparseConfig()

SPARSE_VERSION = (f"qdrant-bm25-multilingual-en-k{K1}-b{B}-avg{AVG_LEN:g}-max{MAX_TOKEN_CHARS}"
                  f"-edge{version('qdrant-edge-py')}")
"""Changes whenever the tokeniser, hashing or weights can change (see module doc)."""


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
