"""Hybrid fusion weights on a grid, over the stores retrieval_bench built, in one run.

    python tests/bench/retrieval_bench.py --models minilm --chunk-tokens 400 --contextual on
    python tests/bench/fusion_bench.py [--sets en,zh] [--models minilm,hash] [--work DIR]

For each set and embedder, every query's dense and BM25 candidates (FUSION_DEPTH each,
the collection's own sparse encoder) are fetched once, then fused by
kbsync.query.fusion.fuse at dense weights 0.0-1.0 (0.0 is BM25 alone, 1.0 dense
alone); nDCG@10 per weight is printed, with the weight search uses today marked.
Not collected by pytest.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(HERE), str(REPO)]

from retrieval_bench import MODELS, SETS  # noqa: E402

GRID = [round(0.1 * i, 1) for i in range(11)]


def _candidates(runtime, queries, namespace: str):
    """(query, dense points, sparse points) per query."""
    from kbsync.query.fusion import FUSION_DEPTH
    from kbsync.store.base import Filter

    flt = Filter.where(namespace=namespace, embedding_failed=False)
    out = []
    for q in queries:
        vector = runtime.service.embed_query(q.query)
        dense = runtime.store.search(runtime.collection, vector, limit=FUSION_DEPTH, flt=flt)
        sparse_query = runtime.sparse.encode_query(q.query)
        sparse = (runtime.store.sparse_search(runtime.collection, sparse_query,
                                              limit=FUSION_DEPTH, flt=flt)
                  if sparse_query.indices else [])
        out.append((q, dense, sparse))
    return out


def _ndcg(candidates, weight: float) -> float:
    from kbsync.eval import metrics as m
    from kbsync.query.fusion import Fusion, fuse
    from kbsync.query.search import to_hit

    total = 0.0
    for q, dense, sparse in candidates:
        fused = fuse(dense, sparse, Fusion(weight), limit=100)
        hits = [to_hit(i, p) for i, p in enumerate(fused, 1)]
        relevant = set(q.relevant)
        total += m.ndcg_at_k(m.rank_documents(hits, relevant), relevant, 10)
    return total / len(candidates)


def main() -> None:
    from kbsync.runtime import Runtime
    from kbsync.eval.run import load_queries
    from kbsync.query.fusion import fusion_for
    from kbsync.settings import Settings

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default="en,zh")
    parser.add_argument("--models", default="minilm,hash")
    parser.add_argument("--chunk-tokens", default="400")
    parser.add_argument("--work", type=Path, default=Path.home() / ".cache" / "kbsync-eval-work")
    args = parser.parse_args()
    print("| set | model | " + " | ".join(f"w={w}" for w in GRID) + " |")
    print("|---|---|" + "---|" * len(GRID))
    for model in args.models.split(","):
        provider, name = MODELS[model]
        for set_name in args.sets.split(","):
            home = args.work / f"{set_name}-{model}-{args.chunk_tokens}-ctx"
            runtime = Runtime.open(Settings(home=home, embed_provider=provider, embed_model=name,
                                            chunk_tokens=int(args.chunk_tokens),
                                            contextual_text=True))
            try:
                queries = load_queries(REPO / "data" / "eval" / SETS[set_name])
                candidates = _candidates(runtime, queries, set_name)
                today = fusion_for(queries[0].query, provider=runtime.service.provider,
                                   model=runtime.service.model,
                                   sparse=runtime.sparse.version).dense_weight
            finally:
                runtime.close()
            cells = [f"**{_ndcg(candidates, w):.3f}**" if w == today
                     else f"{_ndcg(candidates, w):.3f}" for w in GRID]
            print(f"| {set_name} | {model} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
