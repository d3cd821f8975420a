"""Deterministic feature-hashing embedder: no model, no dependency, no network.

Meant for tests and air-gapped use. Two texts sharing words (or, for Chinese,
Japanese and Korean, characters and character pairs) get a positive cosine
similarity; it knows nothing of synonyms or meaning.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from functools import lru_cache
from typing import Sequence

from kbsync.text.cjk import CJK_WORD_CHARS, compiled
from kbsync.embed.base import TextKind

# CJK ideographs, kana, hangul, CJK punctuation excluded: they have no spaces
# between words, so they are indexed as character unigrams and bigrams.
_CJK = CJK_WORD_CHARS
_TOKEN = rf"([{_CJK}]+)|([^\W_]+)"  # compiled on first use (kbsync.text.cjk.compiled)
# Feature used when a text has no token at all, so even "" maps to a
# deterministic non-zero unit vector (a zero vector would be rejected by the
# store as an unflagged fallback).
_BIAS_FEATURE = "\x00empty"


def tokenize(text: str) -> list[str]:
    """Split ``text`` into hashing features.

    Latin/Cyrillic/etc. words are lowercased (``[^\\W_]+`` runs, digits kept);
    each CJK run yields its characters and adjacent character pairs.
    """
    tokens: list[str] = []
    for match in compiled(_TOKEN).finditer(text.lower()):
        cjk, word = match.groups()
        if word is not None:
            tokens.append(word)
            continue
        tokens.extend(cjk)
        tokens.extend(cjk[i : i + 2] for i in range(len(cjk) - 1))
    return tokens


@lru_cache(maxsize=65536)
def _slot(token: str, dimension: int) -> tuple[int, float]:
    """Index and sign of one feature (blake2b: stable across processes, unlike hash())."""
    digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    return (value >> 1) % dimension, (1.0 if value & 1 else -1.0)


class HashEmbedder:
    """Signed feature hashing into ``dimension`` buckets, L2-normalised.

    Invariants: the same text always gives the same vector (in any process, on
    any machine); every vector has unit norm, including for an empty text;
    queries and passages are embedded identically (``kind`` is ignored).
    Term weights are sublinear (``1 + log(tf)``) so a repeated word does not
    dominate.

    Args:
        dimension: vector length, at least 1.
    """

    provider = "hash"

    def __init__(self, dimension: int = 384) -> None:
        if dimension < 1:
            raise ValueError(f"dimension must be >= 1, got {dimension}")
        self.dimension = dimension
        self.model = f"hash-{dimension}"
        self.truncated_inputs = 0  # never truncates; kept for a uniform interface

    def embed_one(self, text: str) -> list[float]:
        """Embed a single text (see the class invariants)."""
        counts = Counter(tokenize(text)) or Counter({_BIAS_FEATURE: 1})
        vector = [0.0] * self.dimension
        for token, tf in counts.items():
            index, sign = _slot(token, self.dimension)
            vector[index] += sign * (1.0 + math.log(tf))
        norm = math.sqrt(sum(x * x for x in vector))
        if norm == 0.0:
            # Opposite signs cancelled exactly in every used bucket: fall back to
            # the bias feature rather than return a zero vector.
            index, sign = _slot(_BIAS_FEATURE, self.dimension)
            vector[index] = sign
            return vector
        return [x / norm for x in vector]

    def embed_batch(self, texts: Sequence[str], kind: TextKind = TextKind.PASSAGE) -> list[list[float]]:
        """Return one unit vector per text, in input order. Never raises for any str input."""
        return [self.embed_one(text) for text in texts]

    def __repr__(self) -> str:
        return f"HashEmbedder(dimension={self.dimension})"
