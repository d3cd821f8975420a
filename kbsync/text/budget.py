"""The chunk budget: how big a chunk may be, and the embedding model's input limit.

:class:`ChunkConfig` bounds every chunk :mod:`kbsync.text.chunk` makes (tokens as
:func:`kbsync.text.chunk.count_tokens` counts them, characters, overlap); :class:`InputFit` is
a model's own limit, which a fitted budget also keeps; :func:`chunk_budget` turns the settings
and the model into the budget in effect (docs/decisions/chunk-budget.md says why these
defaults). Pure values: no I/O, no tokenizer loaded here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kbsync.errors import UsageError


class InputFit(Protocol):
    """An embedding model's input limit in its own tokens.

    Attributes:
        name: names the model and limit; enters document fingerprints.
        limit: most tokens the model reads (special tokens included).
    """

    name: str
    limit: int

    def count(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each text as the model counts them; thread-safe."""


@dataclass(frozen=True)
class ChunkConfig:
    """Chunking budget.

    Attributes:
        max_tokens: Most tokens in a chunk, overlap included (>= 1).
        overlap: Most tokens a chunk repeats from the previous chunk of the same
            section (0 <= overlap < max_tokens).
        max_chars: Most characters in a chunk (>= 1); bounds chunks of huge
            "words" such as a 1 MB line without spaces, which count as one token.
        fit: The embedding model's input limit, or None; with it, chunks are
            also kept within ``fit.limit`` model tokens (see the module doc).
        contextual: The fit counts each chunk with its contextual prefix (the
            text the embedder reads when ``KBSYNC_CONTEXTUAL_TEXT`` is on).

    Raises:
        UsageError: When the values break the bounds above.
    """

    max_tokens: int = 400
    overlap: int = 60
    max_chars: int = 4000
    fit: InputFit | None = field(default=None, compare=False)
    contextual: bool = False

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise UsageError(f"chunk max_tokens must be >= 1, got {self.max_tokens}")
        if not 0 <= self.overlap < self.max_tokens:
            raise UsageError(
                f"chunk overlap must be in [0, max_tokens), got {self.overlap} "
                f"with max_tokens={self.max_tokens}"
            )
        if self.max_chars < 1:
            raise UsageError(f"chunk max_chars must be >= 1, got {self.max_chars}")


DEFAULT_TOKENS = 400
# First budget under a fit, as a share of the model's limit: real English docs
# average ~1.6 word pieces per chunker token (measured on postgresql-doc, git-doc).
_FIT_START = 5 / 8


def chunk_budget(fit: InputFit | None, *, tokens: int | None = None,
                 overlap: int | None = None, contextual: bool = False,
                 fit_chunks: bool = False) -> ChunkConfig:
    """The chunk budget in effect.

    An explicit ``tokens`` wins and drops the fit (the embedder cuts overlong
    chunks and counts them). Otherwise a model with an input limit gets a budget of
    that limit counted in chunker tokens (all-MiniLM-L6-v2: 256): the model reads
    each chunk's head (English runs ~1.6 word pieces a token, so about 160 words)
    and BM25 reads all of it, which retrieved best in both languages
    (docs/decisions/chunk-budget.md: hybrid nDCG@10 English 0.750 / Chinese 0.779,
    against 0.719 / 0.780 with chunks fitted to the model). With ``fit_chunks``
    (``KBSYNC_CHUNK_FIT``) the chunks are fitted instead: a first budget of 5/8 of
    the limit plus the fit, so the model cuts nothing. A model without a limit
    (windowing or API models) gets 400. ``overlap`` defaults to 15% of the budget
    (38 of 256, 60 of 400).

    Raises:
        UsageError: ``overlap`` not below the budget (names both variables).
    """
    if tokens is not None:
        fit = None
    elif fit is not None and fit_chunks:
        tokens = max(1, int(fit.limit * _FIT_START))
    elif fit is not None:
        tokens, fit = fit.limit, None
    else:
        tokens = DEFAULT_TOKENS
    if overlap is None:
        overlap = tokens * 15 // 100
    elif overlap >= tokens:
        raise UsageError(f"KBSYNC_CHUNK_OVERLAP={overlap} must be below the chunk budget {tokens} "
                         "(KBSYNC_CHUNK_TOKENS; when unset, the embedding model's input limit)")
    return ChunkConfig(max_tokens=tokens, overlap=overlap, fit=fit, contextual=contextual)
