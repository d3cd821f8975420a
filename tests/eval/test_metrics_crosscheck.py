"""kbsync's retrieval metrics against trec_eval (pytrec_eval), on random runs and qrels.

``kbsync.eval.metrics`` is hand-written; trec_eval is the reference implementation
of the same measures. 400 random queries (seeded) with 1-12 relevant documents,
some judged non-relevant ones, rankings of 0-40 documents drawn from a pool of 60
(so relevant ones are sometimes missing): every metric must equal trec_eval's
within 1e-9.

Mapping (binary relevance, ``k`` = 10):

- ``ndcg_at_k``   = ``ndcg_cut_10`` (ideal DCG over min(k, |relevant|) documents);
- ``recall_at_k`` = ``recall_10``;
- ``hit_at_k``    = ``success_10``;
- ``mrr_at_k``    = ``recip_rank`` over the run cut at ``k`` (trec_eval's is uncut).

trec_eval ranks by score and breaks ties by doc id; kbsync's ``rank_documents`` breaks
them pessimistically. So trec_eval is handed kbsync's own order as strictly
decreasing scores, and ``rank_documents`` (best chunk per document) is checked
separately on tie-free scores, where both orders must agree.
"""

from __future__ import annotations

import random

import pytest

from kbsync.eval import metrics as m
from kbsync.models import SearchHit

pytrec_eval = pytest.importorskip("pytrec_eval")

K = 10
TOL = 1e-9
MEASURES = {f"ndcg_cut.{K}", f"recall.{K}", f"success.{K}", "recip_rank"}


def _random_query(rng: random.Random) -> tuple[list[str], set[str], dict[str, int]]:
    """(ranking, relevant set, qrels of the query) for one random query."""
    pool = [f"d{i:02d}" for i in range(60)]
    relevant = set(rng.sample(pool, rng.randint(1, 12)))
    judged_off = set(rng.sample([d for d in pool if d not in relevant], rng.randint(0, 5)))
    ranked = rng.sample(pool, rng.randint(0, 40))
    if ranked and rng.random() < 0.3:  # often a relevant one near the top, as in real runs
        ranked.insert(0, rng.choice(sorted(relevant - set(ranked)) or [ranked.pop()]))
    qrels = {d: 1 for d in relevant} | {d: 0 for d in judged_off}
    return ranked, relevant, qrels


def _as_run(ranked: list[str]) -> dict[str, float]:
    """kbsync's order as strictly decreasing scores (trec_eval sorts by score)."""
    return {doc: float(len(ranked) - i) for i, doc in enumerate(ranked)}


def _trec(qrels: dict, run: dict) -> dict[str, dict[str, float]]:
    return pytrec_eval.RelevanceEvaluator(qrels, MEASURES).evaluate(run)


def _cases(n: int = 400, seed: int = 20261201):
    rng = random.Random(seed)
    return [_random_query(rng) for _ in range(n)]


def test_ndcg_recall_hit_equal_trec_eval():
    cases = _cases()
    qrels = {f"q{i}": q for i, (_, _, q) in enumerate(cases)}
    run = {f"q{i}": _as_run(r) for i, (r, _, _) in enumerate(cases)}
    ref = _trec(qrels, run)
    checked = 0
    for i, (ranked, relevant, _) in enumerate(cases):
        got = ref.get(f"q{i}")
        if got is None:  # trec_eval leaves out a query with an empty run
            assert not ranked
            assert m.ndcg_at_k(ranked, relevant, K) == 0.0
            continue
        assert m.ndcg_at_k(ranked, relevant, K) == pytest.approx(got[f"ndcg_cut_{K}"], abs=TOL)
        assert m.recall_at_k(ranked, relevant, K) == pytest.approx(got[f"recall_{K}"], abs=TOL)
        assert m.hit_at_k(ranked, relevant, K) == pytest.approx(got[f"success_{K}"], abs=TOL)
        checked += 1
    assert checked > 350


def test_mrr_at_k_equals_trec_eval_recip_rank_of_the_cut_run():
    cases = _cases(seed=7)
    qrels = {f"q{i}": q for i, (_, _, q) in enumerate(cases)}
    run = {f"q{i}": _as_run(r[:K]) for i, (r, _, _) in enumerate(cases) if r}
    ref = _trec(qrels, run)
    for i, (ranked, relevant, _) in enumerate(cases):
        if ranked:
            assert m.mrr_at_k(ranked, relevant, K) == pytest.approx(
                ref[f"q{i}"]["recip_rank"], abs=TOL)


def test_rank_documents_best_chunk_order_equals_trec_eval_on_distinct_scores():
    """Several chunks per document: trec_eval sees each document at its best chunk's score."""
    rng = random.Random(11)
    qrels, run, ours = {}, {}, {}
    for i in range(300):
        docs = [f"d{j:02d}" for j in rng.sample(range(50), rng.randint(1, 30))]
        hits = [SearchHit(rank=0, score=rng.random(), doc_id=d, path=d, chunk_index=c,
                          heading_path="", page_start=None, page_end=None, text="")
                for d in docs for c in range(rng.randint(1, 3))]
        relevant = set(rng.sample(docs, min(len(docs), rng.randint(1, 4))))
        qid = f"q{i}"
        qrels[qid] = {d: 1 for d in relevant}
        best: dict[str, float] = {}
        for h in hits:
            best[h.doc_id] = max(best.get(h.doc_id, -1.0), h.score)
        run[qid] = best
        ours[qid] = (m.rank_documents(hits, relevant), relevant)
    ref = _trec(qrels, run)
    for qid, (ranked, relevant) in ours.items():
        assert m.ndcg_at_k(ranked, relevant, K) == pytest.approx(
            ref[qid][f"ndcg_cut_{K}"], abs=TOL)
        assert m.mrr_at_k(ranked, relevant, len(ranked)) == pytest.approx(
            ref[qid]["recip_rank"], abs=TOL)
