"""Query-time filters through the real ``kbsync`` command: ingest (the Prefect flow) of a
two-root share, then ``search`` and ``eval`` with each filter.

The share and its expected answers are ``tests/filter_share.py``'s (dense mode,
large k: every chunk the filters let through comes back).
"""

from __future__ import annotations

import json

import pytest

from filter_share import CASES, FILES, make_share
from kbtest import cli_env, run_kbsync


def _argv(filters: dict) -> list[str]:
    argv: list[str] = []
    for key, value in filters.items():
        if isinstance(value, (list, tuple)):
            value = ",".join(value)
        argv += [f"--{key.replace('_', '-')}".replace("--types", "--type"), str(value)]
    return argv


@pytest.mark.slow  # 30-75 s on 4 workers (docs/development.md, Tests)
def test_search_and_eval_filters_through_the_cli(prefect_api, tmp_path):
    share = make_share(tmp_path / "share")
    env = cli_env(prefect_api, tmp_path / "home", KBSYNC_EMBED_PROVIDER="hash")
    code, summary, err = run_kbsync(env, "ingest", f"alpha={share / 'alpha'}",
                                    f"beta={share / 'beta'}", "--json")
    assert code == 0, err
    assert summary["added"] == len(FILES) and summary["failed"] == 0

    for filters, expected in CASES:
        code, data, err = run_kbsync(env, "search", "documentation key interface", "--mode",
                                     "dense", "-k", "100", "--json", *_argv(filters))
        assert code == 0, err
        assert {h["doc_id"] for h in data["results"]} == expected, filters
        assert data["notes"] == []
        assert set(data["filters"]) == {"root", "path_prefix", "types", "modified_since"}

    queries = tmp_path / "q.jsonl"
    queries.write_text(json.dumps({"query": "security policy",
                                   "relevant": ["beta/docs/policy.pdf"]}) + "\n",
                       encoding="utf-8")
    code, result, err = run_kbsync(env, "eval", str(queries), "--root", "beta", "--type", "pdf",
                                   "--modes", "dense", "--report-dir", str(tmp_path / "reports"),
                                   "--json")
    assert code == 0, err
    assert result["filters"] == {"root": "beta", "path_prefix": None, "types": ["pdf"],
                                 "modified_since": None}
    assert result["modes"]["dense"]["hit_rate"] == 1.0  # one pdf left: it ranks first
    code, plain, err = run_kbsync(env, "eval", str(queries), "--report-dir",
                                  str(tmp_path / "reports"), "--json")
    assert code == 0, err
    assert plain["queries_hash"] != result["queries_hash"]  # gates compare like with like
    assert plain["filters"]["root"] is None
