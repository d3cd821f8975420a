"""Which embedding model a share gets, chosen again by measurement (issue 24).

    python data/eval/build_sets.py --out ~/.cache/kbsync-eval      # once
    python tests/bench/model_choice_bench.py [--work DIR] [--mixed-zh 150]

Three shares, each its own namespace of one store per embedder:

* ``en``: the English labelled set (``data/eval/en_rfaq_git.jsonl``, 305 documents);
* ``zh``: the Chinese one (``data/eval/zh_manpages.jsonl``, 350 documents);
* ``mixed``: the English share plus ``--mixed-zh`` pages of the Chinese one (every page a
  Chinese query is about first, then distractors), so about a third of the pages are
  Chinese; its queries are both sets' queries whose documents it holds.

Stores (one ``KBSYNC_HOME`` each, every setting at its default but the model, so the
embedding cache serves ``mixed`` from ``en`` and ``zh``): ``e5`` (multilingual-e5-small on
ONNX Runtime, chunk budget 400), ``minilm`` (int8 MiniLM, budget 256: the English
default) and ``minilm@400`` (MiniLM over e5's chunks, for the ensemble: same chunks, same
point ids).

Configurations, all hybrid (the search default):

* ``minilm everywhere``, ``e5 everywhere``;
* ``rule >= T``: e5 when the share's sampled CJK share (:func:`sample_language`, printed)
  is at least T; T = 0.5 is today's rule, lower ones are the "lower threshold";
* ``ensemble``: e5 and MiniLM dense vectors of the same chunk fused with BM25 (weighted
  DBSF over three lists; a CJK query gives MiniLM, which cannot read it, no weight).

Prints the sampled shares, nDCG@10 per configuration on en, zh, mixed (and its English
and Chinese queries), the mean over the two languages (the choice's criterion), and
what each model cost to ingest (chunks/s, first ingest only; with the load average).
Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(HERE), str(REPO)]

K = 10
SETS = {"en": "en_rfaq_git.jsonl", "zh": "zh_manpages.jsonl"}
STORES = {"e5": ("multilingual-e5-small", None), "minilm": ("all-MiniLM-L6-v2-int8", None),
          "minilm@400": ("all-MiniLM-L6-v2-int8", 400)}
THRESHOLDS = (0.5, 0.3, 0.2, 0.1)
NAMESPACE = {"en": "en", "zh": "zh", "mixed": "mixed"}  # main() names the mixed one
ENSEMBLE_WEIGHTS = ((0.3, 0.3), (0.4, 0.2), (0.2, 0.4))  # (e5, MiniLM); BM25 gets the rest


def _queries(name: str):
    from kbsync.eval.run import load_queries

    return load_queries(REPO / "data" / "eval" / SETS[name])


def _mixed_share(shares: Path, out: Path, zh_pages: int) -> Path:
    """``out/zh``: the Chinese pages of the mixed share (queried pages first)."""
    zh_root = shares / "zh"
    wanted = [d.split("/", 1)[1] for q in _queries("zh") for d in q.relevant]
    others = sorted(str(p.relative_to(zh_root)) for p in zh_root.rglob("*") if p.is_file())
    chosen = list(dict.fromkeys(wanted + others))[:zh_pages]
    target = out / "zh"
    if target.exists():
        shutil.rmtree(target)
    for rel in chosen:
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(zh_root / rel, target / rel)
    return target


def _open(work: Path, store: str):
    from kbsync.runtime import Runtime
    from kbsync.settings import Settings

    model, tokens = STORES[store]
    values = {"home": work / f"choice-{store}", "embed_provider": "local", "embed_model": model}
    if tokens:
        values["chunk_tokens"] = tokens
    return Runtime.open(Settings(**values))


def _ingest(runtime, roots, namespace: str, costs: dict, key: str) -> None:
    from kbsync.ingest.runner import run_plain
    from kbsync.models import RootSpec

    started = time.perf_counter()
    summary = run_plain([RootSpec(name=n, path=p.resolve()) for n, p in roots],
                        runtime=runtime, namespace=namespace)
    took = time.perf_counter() - started
    if summary.added:  # a first ingest: its cost is the model's
        costs[key] = {"chunks": summary.chunks_kept, "seconds": round(took, 1),
                      "load": round(os.getloadavg()[0], 1)}
    print(f"  {key}: {summary.files_seen} files, {summary.added} added, "
          f"{summary.chunks_kept} chunks, {summary.failed} failed, {took:.0f} s", file=sys.stderr)


def _score(queries, ranked_for) -> dict:
    from kbsync.eval import metrics as m

    values = []
    for q in queries:
        ranked = ranked_for(q.query)
        values.append(m.ndcg_at_k(ranked, set(q.relevant), 10))
    return {"ndcg": sum(values) / len(values) if values else float("nan"), "per_query": values}


def _paired_interval(table: dict, name: str, base: str, rounds: int = 2000) -> tuple:
    """Mean over the two languages of ``name`` minus ``base``, with a 95% paired bootstrap
    interval (queries resampled within each language, the same draw for both)."""
    import random

    rng = random.Random(24)
    diffs = {lang: [a - b for a, b in zip(table[name][lang]["per_query"],
                                         table[base][lang]["per_query"])]
             for lang in ("en", "zh")}

    def mean_of(sample: dict) -> float:
        return sum(sum(v) / len(v) for v in sample.values()) / len(sample)
    draws = sorted(mean_of({lang: rng.choices(d, k=len(d)) for lang, d in diffs.items()})
                   for _ in range(rounds))
    return mean_of(diffs), draws[int(0.025 * rounds)], draws[int(0.975 * rounds)]


def _hybrid(runtime, namespace: str):
    from kbsync.eval import metrics as m
    from kbsync.eval.run import search_depth
    from kbsync.query.search import search

    def ranked(text: str) -> list[str]:
        result = search(text, store=runtime.store, service=runtime.service,
                        collection=runtime.collection, namespace=namespace,
                        k=search_depth(K), mode="hybrid")
        return m.rank_documents(result.results)
    return ranked


def _ensemble(e5, minilm, namespace: str, weights: tuple[float, float]):
    """e5 dense + MiniLM dense (same chunks) + BM25, weighted DBSF over the three."""
    from kbsync.eval import metrics as m
    from kbsync.eval.run import search_depth
    from kbsync.catalog.identity import check_query_embedder
    from kbsync.query.fusion import FUSION_DEPTH, _normalised, is_cjk_query
    from kbsync.query.search import CANDIDATE_FACTOR, keep, namespace_filter, to_hit
    from kbsync.store.base import ScoredPoint

    sparse = check_query_embedder(e5.store, e5.service, collection=e5.collection)
    flt = namespace_filter(namespace)
    depth = max(search_depth(K) * CANDIDATE_FACTOR, FUSION_DEPTH)
    w_e5, w_minilm = weights

    def ranked(text: str) -> list[str]:
        lists = [e5.store.search(e5.collection, e5.service.embed_query(text), limit=depth,
                                 flt=flt)]
        weights_now = [w_e5]
        if not is_cjk_query(text):  # MiniLM reads no Chinese: it would only add noise
            lists.append(minilm.store.search(minilm.collection,
                                             minilm.service.embed_query(text), limit=depth,
                                             flt=flt, with_payload=False))
            weights_now.append(w_minilm)
        else:
            weights_now[0] = w_e5 + w_minilm
        query = sparse.encode_query(text)
        lists.append(e5.store.sparse_search(e5.collection, query, limit=depth, flt=flt)
                     if query.indices else [])
        weights_now.append(1.0 - w_e5 - w_minilm)
        payloads = {p.id: p.payload for side in lists for p in side if p.payload}
        scores: dict[str, float] = {}
        for side, weight in zip(lists, weights_now):
            for pid, value in _normalised(side).items():
                scores[pid] = scores.get(pid, 0.0) + weight * value
        missing = [pid for pid in scores if pid not in payloads]
        payloads.update(e5.store.payloads(e5.collection, missing) if missing else {})
        fused = [ScoredPoint(pid, s, payloads[pid]) for pid, s in scores.items()
                 if pid in payloads]
        fused.sort(key=lambda p: -p.score)
        hits = [to_hit(i, p) for i, p in enumerate(keep(fused[:depth], min_score=None)[:100], 1)]
        return m.rank_documents(hits)
    return ranked


def main() -> None:
    from kbsync.convert.safe_read import open_within
    from kbsync.text.language import sample_language

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path.home() / ".cache" / "kbsync-choice")
    parser.add_argument("--mixed-zh", type=int, default=150)
    parser.add_argument("--stores", default="minilm,e5,minilm@400")
    args = parser.parse_args()
    shares = Path(os.environ.get("KBSYNC_EVAL_SHARES",
                                 Path.home() / ".cache" / "kbsync-eval")).expanduser()
    args.work.mkdir(parents=True, exist_ok=True)
    # Another size is another share: its own folder and namespace (``mixed60``).
    NAMESPACE["mixed"] = "mixed" if args.mixed_zh == 150 else f"mixed{args.mixed_zh}"
    mixed_zh = _mixed_share(shares, args.work / NAMESPACE["mixed"], args.mixed_zh)
    roots = {"en": [("en", shares / "en")], "zh": [("zh", shares / "zh")],
             "mixed": [("en", shares / "en"), ("zh", mixed_zh)]}
    sampled = {ns: sample_language([p for _n, p in r], open_file=open_within).cjk_share
               for ns, r in roots.items()}
    mixed_pages = {str(p.relative_to(mixed_zh)) for p in mixed_zh.rglob("*") if p.is_file()}
    queries = {"en": _queries("en"), "zh": _queries("zh")}
    queries["mixed-zh"] = [q for q in queries["zh"]
                           if all(d.split("/", 1)[1] in mixed_pages for d in q.relevant)]
    queries["mixed-en"] = queries["en"]
    cost_file = args.work / "costs.json"
    costs = json.loads(cost_file.read_text()) if cost_file.exists() else {}
    runtimes = {}
    try:
        for store in args.stores.split(","):
            runtimes[store] = _open(args.work, store)
            for ns in ("en", "zh", "mixed"):
                _ingest(runtimes[store], roots[ns], NAMESPACE[ns], costs,
                        f"{store}/{NAMESPACE[ns]}")
                cost_file.write_text(json.dumps(costs, indent=1))
        rows = _configurations(runtimes, sampled)
        table = {name: {part: _score(queries[part], rank(part)) for part in
                        ("en", "zh", "mixed-en", "mixed-zh")} for name, rank in rows.items()}
    finally:
        for runtime in runtimes.values():
            runtime.close()
    (args.work / f"scores-{NAMESPACE['mixed']}.json").write_text(json.dumps(table))
    _print(sampled, table, costs, queries)


def _configurations(runtimes, sampled) -> dict:
    """name -> (part -> ranking function)."""
    def ns_of(part: str) -> str:
        return NAMESPACE[part.split("-")[0]]

    def by_model(pick):
        return lambda part: _hybrid(runtimes[pick(ns_of(part))], ns_of(part))

    rows = {"minilm everywhere": by_model(lambda ns: "minilm"),
            "e5 everywhere": by_model(lambda ns: "e5")}
    for threshold in THRESHOLDS:
        label = f"rule: e5 at CJK >= {threshold:.0%}" + (" (today)" if threshold == 0.5 else "")
        rows[label] = by_model(lambda ns, t=threshold: "e5" if sampled[_set_of(ns)] >= t
                               else "minilm")
    if "minilm@400" in runtimes:
        for weights in ENSEMBLE_WEIGHTS:
            rows[f"ensemble e5 {weights[0]} + MiniLM {weights[1]} + BM25"] = (
                lambda part, w=weights: _ensemble(runtimes["e5"], runtimes["minilm@400"],
                                                  ns_of(part), w))
    return rows


def _set_of(namespace: str) -> str:
    return next(key for key, value in NAMESPACE.items() if value == namespace)


def _print(sampled, table, costs, queries) -> None:
    print(f"load average {os.getloadavg()[0]:.1f}")
    print("\nsampled CJK share: " + ", ".join(f"{ns} {v:.2f}" for ns, v in sampled.items()))
    print(f"queries: en {len(queries['en'])}, zh {len(queries['zh'])}, mixed "
          f"{len(queries['mixed-en'])} English + {len(queries['mixed-zh'])} Chinese\n")
    print("| configuration | en | zh | **mean en, zh** | mixed: en queries | mixed: zh queries |")
    print("|---|---|---|---|---|---|")
    for name, parts in table.items():
        mean = (parts["en"]["ndcg"] + parts["zh"]["ndcg"]) / 2
        print(f"| {name} | {parts['en']['ndcg']:.3f} | {parts['zh']['ndcg']:.3f} | "
              f"**{mean:.3f}** | {parts['mixed-en']['ndcg']:.3f} | "
              f"{parts['mixed-zh']['ndcg']:.3f} |")
    base = next(name for name in table if name.endswith("(today)"))
    print(f"\nagainst {base}, mean over en and zh (95% paired bootstrap interval):")
    for name in table:
        if name != base:
            diff, low, high = _paired_interval(table, name, base)
            print(f"- {name}: {diff:+.4f} [{low:+.4f}, {high:+.4f}]")
    print("\n| store/share (first ingest) | chunks | seconds | chunks/s | load |\n|---|---|---|---|---|")
    for key, c in sorted(costs.items()):
        print(f"| {key} | {c['chunks']} | {c['seconds']} | {c['chunks'] / c['seconds']:.1f} | "
              f"{c['load']} |")


if __name__ == "__main__":
    main()
