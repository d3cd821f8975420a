"""kbsync's BM25 encoder against qdrant-edge-py's own ``Bm25``, on the same chunks, one run.

    python tests/bench/retrieval_bench.py --models hash --chunk-tokens 400 --contextual on  # once
    python tests/bench/bm25_bench.py [--sets en,zh] [--work DIR] [--chunk-tokens 400]
    python tests/bench/bm25_bench.py --chunk-tokens 256 --grid   # k1 / b / avg_len of ours

The chunks are read back from the stores retrieval_bench built (``SET-hash-400-ctx``), so
both encoders see exactly the texts kbsync encodes (title and heading path in front). Each
encoder's document and query vectors are scored the way Qdrant's IDF modifier scores them,
``sum over query terms of idf(t) * doc_weight(t)`` with ``idf = ln(1 + (N - n + 0.5) /
(n + 0.5))``, in memory, so only the tokenisation and weighting differ. Chunk hits are
ranked into documents like search does (best chunk per document), and nDCG@10, hit@10
and MRR come from kbsync.eval.metrics. Not collected by pytest.

Encoders: ``kbsync`` (kbsync/text/sparse.py: words, S-stemmer, CJK bigrams),
``edge-en`` (Bm25Config defaults: English word tokenizer, stop words, Snowball stemmer),
``edge-multi`` (the Multilingual tokenizer, English stop words and stemmer), and
``edge-multi-plain`` (Multilingual, no stemmer, no stop words).

``--grid`` scores kbsync's encoder alone at several (k1, b, avg_len) instead, marking
the defaults; ``--chunk-tokens`` picks the stores (``SET-hash-N-ctx``) to read.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(HERE), str(REPO)]

SETS = {"en": "en_rfaq_git.jsonl", "zh": "zh_manpages.jsonl"}
K = 10


GRID = [(1.2, 0.75, 50.0), (1.5, 0.75, 50.0), (0.9, 0.4, 50.0), (1.2, 0.5, 50.0),
        (1.2, 0.75, 150.0), (1.2, 0.75, 250.0), (2.0, 0.75, 150.0)]
"""(k1, b, avg_len) of ``--grid``; the first is kbsync's default."""


def _chunks(work: Path, set_name: str, chunk_tokens: int = 400) -> list[tuple[str, str]]:
    """(doc_id, contextual text) of every chunk retrieval_bench stored for the set."""
    from kbsync.runtime import Runtime
    from kbsync.settings import Settings
    from kbsync.text.context import contextual_text

    home = work / f"{set_name}-hash-{chunk_tokens}-ctx"
    if not home.exists():
        raise SystemExit(f"{home} is missing: run retrieval_bench.py --models hash "
                         f"--chunk-tokens {chunk_tokens} --contextual on first")
    runtime = Runtime.open(Settings(home=home, embed_provider="hash", chunk_tokens=chunk_tokens,
                                    contextual_text=True))
    try:
        return [(p.payload["doc_id"], contextual_text(
                    p.payload["text"], title=p.payload.get("title") or "",
                    heading_path=p.payload.get("heading_path") or ""))
                for p in runtime.store.scroll(runtime.collection)]
    finally:
        runtime.close()


def _encoders() -> dict[str, tuple]:
    """name -> (encode_document, encode_query), each text -> {index: weight}."""
    import qdrant_edge as q

    from kbsync.text.sparse import DEFAULT

    def edge(config):
        model = q.Bm25(config)
        return (lambda t: dict(zip(*_sv(model.embed_document(t)))),
                lambda t: dict(zip(*_sv(model.embed_query(t)))))

    plain = q.Bm25Config(tokenizer=q.TokenizerType.Multilingual, stemmer=q.DisabledStemmer(),
                         stopwords=q.StopwordsSet(languages=set(), custom=set()))
    return {
        "kbsync": _ours(DEFAULT),
        "edge-en": edge(q.Bm25Config()),
        "edge-multi": edge(q.Bm25Config(tokenizer=q.TokenizerType.Multilingual)),
        "edge-multi-plain": edge(plain),
    }


def _grid_encoders() -> dict[str, tuple]:
    """``k1=.. b=.. avg_len=..`` -> kbsync's encoders at those parameters."""
    from kbsync.text.sparse import SparseConfig

    return {f"k1={k1} b={b} avg_len={avg:g}" + (" (default)" if i == 0 else ""):
            _ours(SparseConfig(k1=k1, b=b, avg_len=avg))
            for i, (k1, b, avg) in enumerate(GRID)}


def _ours(config) -> tuple:
    """kbsync's (encode_document, encode_query) at ``config``, each text -> {index: weight}."""
    from kbsync.text.sparse import encode_document, encode_query

    return (lambda t: dict(zip(*_sv(encode_document(t, config)))),
            lambda t: dict(zip(*_sv(encode_query(t, config)))))


def _sv(vector) -> tuple[list[int], list[float]]:
    return list(vector.indices), list(vector.values)


def _score(chunks, queries, encode_doc, encode_query) -> dict[str, float]:
    from kbsync.eval import metrics as m

    postings: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for i, (_, text) in enumerate(chunks):
        for term, weight in encode_doc(text).items():
            postings[term].append((i, weight))
    n = len(chunks)
    totals = defaultdict(float)
    for q in queries:
        scores: dict[int, float] = defaultdict(float)
        for term, qweight in encode_query(q.query).items():
            posting = postings.get(term, [])
            idf = math.log(1 + (n - len(posting) + 0.5) / (len(posting) + 0.5))
            for i, weight in posting:
                scores[i] += idf * weight * qweight
        ranked_docs: list[str] = []
        for i in sorted(scores, key=scores.get, reverse=True)[:100]:
            if chunks[i][0] not in ranked_docs:
                ranked_docs.append(chunks[i][0])
        relevant = set(q.relevant)
        totals["ndcg@10"] += m.ndcg_at_k(ranked_docs, relevant, 10)
        totals["hit@10"] += m.hit_at_k(ranked_docs, relevant, K)
        totals["mrr"] += m.mrr_at_k(ranked_docs, relevant, K)
    return {k: v / len(queries) for k, v in totals.items()}


def main() -> None:
    from kbsync.eval.run import load_queries

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default="en,zh")
    parser.add_argument("--work", type=Path, default=Path.home() / ".cache" / "kbsync-eval-work")
    parser.add_argument("--chunk-tokens", type=int, default=400)
    parser.add_argument("--grid", action="store_true",
                        help="kbsync's encoder at several k1 / b / avg_len (see GRID)")
    args = parser.parse_args()
    encoders = _grid_encoders() if args.grid else _encoders()
    print("| set | encoder | nDCG@10 | hit@10 | MRR |\n|---|---|---|---|---|")
    for set_name in args.sets.split(","):
        chunks = _chunks(args.work, set_name, args.chunk_tokens)
        queries = load_queries(REPO / "data" / "eval" / SETS[set_name])
        for name, (doc, query) in encoders.items():
            x = _score(chunks, queries, doc, query)
            print(f"| {set_name} ({len(chunks)} chunks) | {name} | {x['ndcg@10']:.3f} | "
                  f"{x['hit@10']:.3f} | {x['mrr']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
