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
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=2000)
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--skip-local", action="store_true", help="only the hash-provider row")
    args = parser.parse_args()
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
