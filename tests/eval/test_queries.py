"""Query files (JSONL and CSV) and mode specs."""

from __future__ import annotations


import pytest

from kbsync.errors import QueryFileError, UsageError
from kbsync.eval.run import (EvalQuery, load_queries, parse_modes, queries_hash,
                             supported_search)
from kbtest import REPO, SAMPLE


def test_jsonl_with_blank_lines_extra_keys_and_duplicate_labels(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text('{"query": "rotate keys", "relevant": ["s/a.md", "s/b.md", "s/a.md"]}\n'
                    "\n"
                    '{"query": " 忘记密码 ", "relevant": ["s/zh.md"], "lang": "zh"}\n'
                    '{"query": "off topic", "relevant": []}\n', encoding="utf-8")
    assert load_queries(path) == [EvalQuery(1, "rotate keys", ("s/a.md", "s/b.md")),
                                  EvalQuery(3, "忘记密码", ("s/zh.md",)),
                                  EvalQuery(4, "off topic", ())]


def test_every_bad_jsonl_line_is_reported_with_its_number(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text('{"query": "ok", "relevant": ["a"]}\n'
                    '{"query": "broken", \n'
                    '{"query": "no labels"}\n'
                    '["not", "an", "object"]\n'
                    '{"query": "", "relevant": ["a"]}\n'
                    '{"query": "labels as string", "relevant": "a|b"}\n', encoding="utf-8")
    with pytest.raises(QueryFileError) as info:
        load_queries(path)
    assert [n for n, _ in info.value.problems] == [2, 3, 4, 5, 6]
    message = str(info.value)
    assert "5 bad line(s)" in message
    assert "line 2: not valid JSON" in message and "line 3: 'relevant' is missing" in message
    assert isinstance(info.value, UsageError)  # the CLI exits 2


def test_csv_with_pipes_quotes_and_a_multiline_record(tmp_path):
    path = tmp_path / "q.csv"
    path.write_text("\ufeffquery,relevant,note\n"
                    "rotate keys, s/a.md | s/b.md ,x\n"
                    '"deploys, rollbacks",s/d.md,\n'
                    '"two\nlines",s/e.md,\n'
                    "unlabelled,,\n", encoding="utf-8")
    assert load_queries(path) == [EvalQuery(2, "rotate keys", ("s/a.md", "s/b.md")),
                                  EvalQuery(3, "deploys, rollbacks", ("s/d.md",)),
                                  EvalQuery(4, "two\nlines", ("s/e.md",)),
                                  EvalQuery(6, "unlabelled", ())]


def test_bad_csv_lines_and_headers(tmp_path):
    path = tmp_path / "q.csv"
    path.write_text("query,relevant\nok,a\ntoo,many,fields\n,b\n", encoding="utf-8")
    with pytest.raises(QueryFileError) as info:
        load_queries(path)
    assert [n for n, _ in info.value.problems] == [3, 4]
    path.write_text("question,docs\nx,a\n", encoding="utf-8")
    with pytest.raises(QueryFileError, match="line 1: CSV header must name"):
        load_queries(path)


def test_empty_missing_and_undecodable_files(tmp_path):
    empty = tmp_path / "e.jsonl"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(QueryFileError, match="no queries"):
        load_queries(empty)
    with pytest.raises(UsageError, match="does not exist"):
        load_queries(tmp_path / "missing.jsonl")
    latin = tmp_path / "l.csv"
    latin.write_bytes(b"query,relevant\ncaf\xe9,a\n")
    with pytest.raises(QueryFileError, match="line 2: not valid UTF-8"):
        load_queries(latin)


def test_query_set_hash_ignores_line_numbers_and_label_order():
    a = [EvalQuery(1, "q", ("x", "y"))]
    assert queries_hash(a) == queries_hash([EvalQuery(7, "q", ("y", "x"))])
    assert queries_hash(a) != queries_hash([EvalQuery(1, "q", ("x",))])


def test_shipped_sample_queries_parse_and_name_sample_documents():
    queries = load_queries(REPO / "data" / "eval" / "sample_queries.jsonl")
    assert 20 <= len(queries) <= 40
    assert any(any("\u4e00" <= ch <= "\u9fff" for ch in q.query) for q in queries)
    for q in queries:
        assert q.relevant
        for doc_id in q.relevant:
            root, _, rel = doc_id.partition("/")
            assert root == "sample" and (SAMPLE / rel).is_file(), doc_id


def _search_of(spec):
    """(mode, mqe, hyde) of the search a mode spec asks for."""
    request = spec.request("q", namespace="ns", k=5)
    return request.mode.value, request.mqe, request.hyde


def test_mode_specs():
    modes, options = supported_search()
    assert "dense" in modes
    assert [_search_of(s) for s in parse_modes(["dense"])] == [("dense", 0, False)]
    with pytest.raises(UsageError, match="unknown search mode 'sparse'"):
        parse_modes(["sparse"])
    with pytest.raises(UsageError, match="twice"):
        parse_modes(["dense", "Dense"])
    with pytest.raises(UsageError, match="bad mode"):
        parse_modes(["dense+rerank"])
    with pytest.raises(UsageError, match="no retrieval mode"):
        parse_modes([" "])
    if "hybrid" in modes:
        assert _search_of(parse_modes(["hybrid"])[0]) == ("hybrid", 0, False)
    else:
        with pytest.raises(UsageError, match="unknown search mode 'hybrid'"):
            parse_modes(["hybrid"])
    if {"mqe", "hyde"} <= options:
        spec = parse_modes(["dense+mqe2+hyde"])[0]
        assert _search_of(spec) == ("dense", 2, True) and spec.needs_llm
        assert parse_modes(["dense+mqe"])[0].mqe == 3
    else:
        with pytest.raises(UsageError, match="does not support"):
            parse_modes(["dense+mqe2"])


def test_query_file_error_survives_pickling():
    import pickle

    error = pickle.loads(pickle.dumps(QueryFileError("q.jsonl", [(3, "bad")])))
    assert error.problems == [(3, "bad")] and str(error) == "q.jsonl: 1 bad line(s): line 3: bad"


def test_a_line_nested_past_the_parser_limit_is_a_bad_line_and_exit_2(tmp_path):
    """Issue 37: a 100,000-deep ``relevant`` array ended in RecursionError, exit 1."""
    import subprocess
    import sys
    from pathlib import Path

    from kbtest import hash_env

    deep = 100_000
    path = tmp_path / "deep.jsonl"
    path.write_text('{"query": "fine", "relevant": ["a/b.md"]}\n'
                    '{"query": "x", "relevant": ' + "[" * deep + "]" * deep + "}\n")
    with pytest.raises(QueryFileError) as err:
        load_queries(path)
    assert err.value.problems == [(2, err.value.problems[0][1])]
    assert "nested too deeply" in str(err.value)
    kbsync = str(Path(sys.executable).with_name("kbsync"))
    proc = subprocess.run([kbsync, "eval", str(path), "--json"], capture_output=True, text=True,
                          env=hash_env(None, tmp_path / "home"), timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "line 2: nested too deeply" in proc.stderr
