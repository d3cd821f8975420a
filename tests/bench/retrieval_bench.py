"""Retrieval benchmark: labelled real sets x embedders x modes, in one run.

    python data/eval/build_sets.py --out ~/.cache/kbsync-eval      # once
    python tests/bench/retrieval_bench.py [--sets en,zh] [--models minilm,e5,hash]
                                          [--chunk-tokens N] [--work DIR]
                                          [--contextual on|off|off,on]

For each set (``data/eval/en_rfaq_git.jsonl`` over the ``en`` share,
``data/eval/zh_manpages.jsonl`` over ``zh``) and each embedder, the share is ingested
with the plain loop (kbsync.ingest.runner.run_plain; the store is kept under ``--work`` and
re-used when the settings are the same, so a second run only re-evaluates), then
every query is searched in each mode. ``bm25`` is the sparse half alone (a plain
BM25 baseline over the same chunks). Prints nDCG@10, hit@10, MRR and p50 latency
per set x model x mode, and the mean over the two languages. ``--contextual off,on``
adds an axis: each store is built with ``KBSYNC_CONTEXTUAL_TEXT`` off and on (title and
heading path in front of the embedded and BM25-encoded text), side by side.
Not collected by pytest.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(HERE), str(REPO)]

SETS = {"en": "en_rfaq_git.jsonl", "zh": "zh_manpages.jsonl"}
MODELS = {"minilm": ("local", "all-MiniLM-L6-v2"), "e5": ("local", "multilingual-e5-small"),
          "minilm-int8": ("local", "all-MiniLM-L6-v2-int8"),
          "hash": ("hash", None)}
K = 10


def _settings(home: Path, model: str, chunk_tokens: int | None, contextual: bool):
    from kbsync.settings import Settings

    provider, name = MODELS[model]
    env = {"home": home, "embed_provider": provider, "embed_model": name,
           "contextual_text": contextual}
    if chunk_tokens:
        env["chunk_tokens"] = chunk_tokens
    return Settings(**env)


def _ingest(runtime, share: Path, name: str) -> float:
    from kbsync.ingest.runner import run_plain
    from kbsync.models import RootSpec

    started = time.perf_counter()
    summary = run_plain([RootSpec(name=name, path=share.resolve())], runtime=runtime,
                        namespace=name)
    took = time.perf_counter() - started
    print(f"  ingest {name}: {summary.files_seen} files, {summary.chunks_kept} chunks, "
          f"{summary.failed} failed, {summary.embeddings_truncated} cut, {took:.0f} s",
          file=sys.stderr)
    return took


def _bm25_outcomes(queries, runtime, namespace: str):
    """The sparse half alone, scored like a mode."""
    from kbsync.eval import metrics as m
    from kbsync.eval.run import QueryOutcome
    from kbsync.query.search import to_hit
    from kbsync.text.sparse import encode_query
    from kbsync.store.base import Filter

    flt = Filter.where(namespace=namespace, embedding_failed=False)
    outcomes = []
    for q in queries:
        started = time.perf_counter()
        points = runtime.store.sparse_search(runtime.collection, encode_query(q.query),
                                             limit=100, flt=flt)
        latency = (time.perf_counter() - started) * 1000
        hits = [to_hit(i, p) for i, p in enumerate(points, 1)]
        relevant = set(q.relevant)
        ranked = m.rank_documents(hits, relevant)
        outcomes.append(QueryOutcome(
            mode="bm25", line=q.line, query=q.query, relevant=list(q.relevant),
            top_docs=ranked[:K], first_relevant_rank=m.first_relevant_rank(ranked, relevant),
            hit=m.hit_at_k(ranked, relevant, K), mrr=m.mrr_at_k(ranked, relevant, K),
            ndcg10=m.ndcg_at_k(ranked, relevant, 10), recall=m.recall_at_k(ranked, relevant, K),
            raw_count=len(points), kept_count=len(points), latency_ms=latency, notes=""))
    return outcomes


def measure(set_name: str, model: str, work: Path, chunk_tokens: int | None,
            modes: list[str], contextual: bool = False) -> dict[str, dict]:
    """Ingest one set with one embedder (if not done yet) and score every mode."""
    from kbsync.eval.run import aggregate, load_queries, parse_modes, run_mode
    from kbsync.runtime import Runtime

    share = Path(os.environ.get("KBSYNC_EVAL_SHARES", Path.home() / ".cache" / "kbsync-eval"))
    home = work / f"{set_name}-{model}-{chunk_tokens or 'default'}{'-ctx' if contextual else ''}"
    runtime = Runtime.open(_settings(home, model, chunk_tokens, contextual))
    try:
        _ingest(runtime, share.expanduser() / set_name, set_name)
        queries = load_queries(REPO / "data" / "eval" / SETS[set_name])
        outcomes = []
        for spec in parse_modes([m for m in modes if m != "bm25"]):
            outcomes += run_mode(queries, spec, runtime=runtime, namespace=set_name, k=K)
        if "bm25" in modes:
            outcomes += _bm25_outcomes(queries, runtime, set_name)
        return aggregate(outcomes)
    finally:
        runtime.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default="en,zh")
    parser.add_argument("--models", default="minilm,e5")
    parser.add_argument("--modes", default="dense,hybrid,bm25")
    parser.add_argument("--chunk-tokens", type=int, default=None)
    parser.add_argument("--work", type=Path, default=Path.home() / ".cache" / "kbsync-eval-work")
    parser.add_argument("--contextual", default="off",
                        help="off, on, or off,on (contextual text; see the module doc)")
    args = parser.parse_args()
    modes = args.modes.split(",")
    rows = []
    for model in args.models.split(","):
        for set_name in args.sets.split(","):
            for ctx in args.contextual.split(","):
                result = measure(set_name, model, args.work, args.chunk_tokens, modes,
                                 contextual=ctx == "on")
                label = f"{model}+ctx" if ctx == "on" else model
                for mode, metrics in result.items():
                    rows.append((set_name, label, mode, metrics))
    print("| set | model | mode | nDCG@10 | hit@10 | MRR | p50 ms | raw | kept |")
    print("|---|---|---|---|---|---|---|---|---|")
    for set_name, model, mode, x in rows:
        print(f"| {set_name} | {model} | {mode} | {x['ndcg@10']:.3f} | {x['hit_rate']:.3f} | "
              f"{x['mrr']:.3f} | {x['latency_ms_p50']:.1f} | {x['raw_count_mean']:.0f} | "
              f"{x['kept_count_mean']:.0f} |")
    means: dict[tuple[str, str], list[float]] = {}
    for set_name, model, mode, x in rows:
        means.setdefault((model, mode), []).append(x["ndcg@10"])
    print("\n| model | mode | mean nDCG@10 over sets |\n|---|---|---|")
    for (model, mode), values in means.items():
        print(f"| {model} | {mode} | {sum(values) / len(values):.3f} |")


if __name__ == "__main__":
    main()
