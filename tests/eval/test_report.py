"""Report files, history and the regression gate (no search, no Prefect)."""

from __future__ import annotations

import json

import pytest

from kbsync.eval.report import find_baseline, gate_message, summary_markdown, write_report
from kbsync.eval.run import EvalQuery, QueryOutcome, build_result

QUERIES = [EvalQuery(1, "rotate keys", ("s/a.md",)), EvalQuery(2, "忘记密码", ("s/zh.md",))]


def result(ndcg: dict[str, float], *, queries=QUERIES, namespace: str = "ns"):
    """An evaluation whose per-mode nDCG@10 is exactly ``ndcg``."""
    outcomes = []
    for mode, value in ndcg.items():
        for q in queries:
            outcomes.append(QueryOutcome(
                mode=mode, line=q.line, query=q.query, relevant=list(q.relevant),
                top_docs=["s/x.md", *q.relevant], first_relevant_rank=2, hit=1.0 if value else 0.0,
                mrr=0.5, ndcg10=value, recall=1.0, raw_count=40, kept_count=31, latency_ms=3.0))
    return build_result(queries, outcomes, k=5, namespace=namespace,
                        embedding={"provider": "hash", "model": "hash-384", "dimension": 384})


def test_files_latest_and_history_are_written(tmp_path):
    first = write_report(result({"dense": 0.8, "hybrid": 0.9}), tmp_path, margin=0.02)
    report = first.report
    for key in ("per_query_csv", "summary_md", "chart_png", "result_json", "latest_json"):
        assert (tmp_path / report[key].split(str(tmp_path) + "/", 1)[1]).stat().st_size > 0
    with open(report["chart_png"], "rb") as handle:
        assert handle.read(8) == b"\x89PNG\r\n\x1a\n"
    latest = json.loads((tmp_path / "latest.json").read_text(encoding="utf-8"))
    assert latest == json.loads(json.dumps(first.to_dict()))
    assert set(latest) >= {"queries", "k", "namespace", "modes", "report", "regression"}
    assert set(latest["modes"]["dense"]) >= {
        "hit_rate", "mrr", "ndcg@10", "recall@k", "raw_count_mean", "kept_count_mean",
        "latency_ms_p50", "latency_ms_p95"}
    assert latest["regression"]["passed"] and latest["regression"]["baseline"] is None
    csv_text = open(report["per_query_csv"], encoding="utf-8").read()
    assert csv_text.splitlines()[0].startswith("mode,line,query,relevant,top_docs")
    assert "忘记密码" in csv_text and "s/x.md|s/zh.md" in csv_text
    assert "| dense |" in open(report["summary_md"], encoding="utf-8").read()
    history = (tmp_path / "history.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(history) == 1 and json.loads(history[0])["run"] == report["run"]


def test_gate_trips_on_a_drop_beyond_the_margin_only(tmp_path):
    write_report(result({"dense": 0.80, "hybrid": 0.90}), tmp_path)
    small = write_report(result({"dense": 0.79, "hybrid": 0.90}), tmp_path, margin=0.02)
    assert small.regression["passed"]  # -0.01 is within the margin
    drop = write_report(result({"dense": 0.70, "hybrid": 0.95}), tmp_path, margin=0.02)
    reg = drop.regression
    assert not reg["passed"] and not drop.gate_ok
    assert reg["baseline"] == small.report["run"]
    by_mode = {c["mode"]: c for c in reg["compared"]}
    assert by_mode["dense"] == {"mode": "dense", "previous": 0.79, "current": 0.7,
                                "delta": -0.09, "dropped": True}
    assert by_mode["hybrid"]["dropped"] is False
    assert gate_message(reg) == "dense: ndcg@10 0.7900 -> 0.7000 (-0.0900, allowed drop 0.02)"
    assert "FAILED" in summary_markdown(drop)
    # the failed run is recorded but is not the baseline: running again still fails
    again = write_report(result({"dense": 0.70, "hybrid": 0.95}), tmp_path)
    assert not again.regression["passed"]
    assert again.regression["baseline"] == small.report["run"]
    assert json.loads((tmp_path / "latest.json").read_text())["report"]["run"] == \
        again.report["run"]


def test_accepting_a_drop_makes_it_the_new_baseline(tmp_path):
    write_report(result({"dense": 0.8}), tmp_path)
    accepted = write_report(result({"dense": 0.6}), tmp_path, accept=True)
    assert accepted.regression["accepted"] and accepted.gate_ok
    assert "accepted as the new baseline" in summary_markdown(accepted)
    after = write_report(result({"dense": 0.6}), tmp_path)
    assert after.regression["passed"] and after.regression["baseline"] == accepted.report["run"]


def test_only_comparable_runs_are_baselines(tmp_path):
    write_report(result({"dense": 0.9}), tmp_path)
    other_set = [EvalQuery(1, "another question", ("s/a.md",))]
    assert write_report(result({"dense": 0.1}, queries=other_set), tmp_path).regression[
        "baseline"] is None
    assert write_report(result({"dense": 0.1}, namespace="other"), tmp_path).regression[
        "baseline"] is None
    assert not write_report(result({"dense": 0.1}), tmp_path).regression["passed"]


def test_a_previous_history_entry_written_by_hand_is_honoured(tmp_path):
    current = result({"dense": 0.5})
    entry = {"run": "hand-made", "created_at": "2024-01-01T00:00:00+00:00", "namespace": "ns",
             "queries_hash": current.queries_hash, "modes": {"dense": {"ndcg@10": 0.6}},
             "passed": True}
    (tmp_path / "history.jsonl").write_text("not json\n" + json.dumps(entry) + "\n",
                                            encoding="utf-8")
    assert find_baseline(tmp_path, namespace="ns", queries_hash=current.queries_hash)["run"] \
        == "hand-made"
    out = write_report(current, tmp_path, margin=0.05)
    assert not out.regression["passed"] and out.regression["compared"][0]["delta"] == -0.1


def test_negative_margin_is_refused(tmp_path):
    with pytest.raises(ValueError):
        write_report(result({"dense": 0.5}), tmp_path, margin=-0.1)
