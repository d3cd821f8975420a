"""Query-time filters end to end: a two-root share ingested (plain runner, hash embedder),
then searched with each filter through ``kbsync.search``, ``kbsync.api`` and the CLI.

Dense mode and a large k make every search return every chunk the filters let
through (the hash embedder ranks, it does not select), so each assertion is on
the exact set of documents: nothing outside the filter, nothing inside it missed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kbsync
from kbsync import api
from kbsync.errors import UsageError
from kbsync.query.filters import SOURCE_TYPES, SearchFilters
from filter_share import CASES, FILES, make_share
from kbtest import cli_env, run_kbsync


@pytest.fixture
def share(tmp_path: Path) -> Path:
    return make_share(tmp_path / "share")


@pytest.fixture
def kb(settings, share):
    """The share's two roots ingested into namespace ``default``; the settings."""
    from kbsync.runtime import Runtime
    from kbsync.ingest.discover import parse_root
    from kbsync.ingest.runner import run_plain

    runtime = Runtime.open(settings)
    try:
        summary = run_plain([parse_root(f"alpha={share / 'alpha'}"),
                             parse_root(f"beta={share / 'beta'}")], runtime=runtime)
    finally:
        runtime.close()
    assert summary.failed == 0 and summary.added == len(FILES)
    return settings


def _docs(result) -> set[str]:
    return {hit.doc_id for hit in result.results}


@pytest.mark.parametrize(("filters", "expected"), CASES)
def test_each_filter_returns_exactly_its_documents(kb, filters, expected):
    result = kbsync.search("documentation key interface", settings=kb, mode="dense", k=100,
                           **filters)
    assert _docs(result) == expected
    assert result.filters == SearchFilters.build(**filters).to_dict()
    assert result.notes == []


def test_hybrid_and_api_apply_the_filters_too(kb):
    hybrid = kbsync.search("signing key tokens", settings=kb, k=100, root="alpha",
                           path_prefix="docs/api")
    assert hybrid.mode == "hybrid" and _docs(hybrid) <= {"alpha/docs/api/auth.md",
                                                         "alpha/docs/api/reference.html"}
    assert "alpha/docs/api/auth.md" in _docs(hybrid)
    with api.KnowledgeBase(kb) as base:
        found = base.search("anything", k=100, mode="dense", types=["pdf"])
        assert _docs(found) == {"beta/docs/policy.pdf"}
        assert found.to_dict()["filters"] == {"root": None, "path_prefix": None,
                                              "types": ["pdf"], "modified_since": None}
    assert _docs(api.search("anything", settings=kb, k=100, mode="dense",
                            modified_since="2024-07-15")) == {"beta/docs/api-old/legacy.md"}


def test_namespace_stays_mandatory(kb):
    assert kbsync.search("documentation", settings=kb, namespace="other", k=100,
                         root="alpha").results == []


@pytest.mark.parametrize("bad", [{"types": "pdf,exe"}, {"types": ""}, {"path_prefix": "../x"},
                                 {"path_prefix": "/"}, {"modified_since": "yesterday"},
                                 {"root": "  "}])
def test_bad_filter_values_are_usage_errors(kb, bad):
    with pytest.raises(UsageError):
        kbsync.search("x", settings=kb, **bad)


def test_older_chunks_without_the_new_fields_are_named_in_a_note(kb, caplog):
    from kbsync.store import Filter, Point, open_store

    store = open_store(kb)
    try:
        old = next(iter(store.scroll(kb.collection, Filter.where(root="alpha"),
                                     with_vectors=True)))
        legacy = {k: v for k, v in old.payload.items()
                  if k not in ("folders", "modified", "payload_version")}
        legacy.update(doc_id="alpha/docs/old.md", text="A chunk written by an older kbsync.")
        store.upsert(kb.collection, [Point("00000000-0000-4000-8000-000000000001", legacy,
                                           old.vector)])
        flagged = kbsync.search("x", store=store, settings=kb, path_prefix="docs", k=100)
        plain = kbsync.search("x", store=store, settings=kb, root="alpha", k=100)
    finally:
        store.close()
    assert "alpha/docs/old.md" not in _docs(flagged)
    assert len(flagged.notes) == 1 and flagged.notes[0].startswith("1 chunks in this namespace")
    assert "kbsync ingest" in flagged.notes[0] and "written before" in caplog.text
    assert plain.notes == [] and "alpha/docs/old.md" in _docs(plain)  # root: an old field


def test_a_payload_version_change_rewrites_every_document_once(settings, share, monkeypatch):
    from kbsync import runtime as rt_mod
    from kbsync.ingest.discover import parse_root
    from kbsync.ingest.runner import run_plain

    roots = [parse_root(f"alpha={share / 'alpha'}")]
    monkeypatch.setattr(rt_mod, "PAYLOAD_VERSION", 1)  # as a store written before version 2
    runtime = rt_mod.Runtime.open(settings)
    try:
        first = run_plain(roots, runtime=runtime)
        monkeypatch.setattr(rt_mod, "PAYLOAD_VERSION", 2)
        second = run_plain(roots, runtime=runtime)
        third = run_plain(roots, runtime=runtime)
    finally:
        runtime.close()
    assert first.added == second.updated == third.unchanged == 5
    assert second.embeddings_computed == 0  # the embedding cache serves the rewrite


def test_the_cli_takes_the_filters_and_echoes_them(kb, capsys):
    from kbsync.app.cli import main

    code = main(["search", "documentation", "--json", "--mode", "dense", "-k", "100",
                 "--root", "alpha", "--path-prefix", "docs", "--type", "md", "--type", "html",
                 "--modified-since", "2024-06-01"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert {h["doc_id"] for h in data["results"]} == {"alpha/docs/api/auth.md",
                                                      "alpha/docs/api/reference.html"}
    assert data["filters"] == {"root": "alpha", "path_prefix": "docs",
                               "types": ["markdown", "html"],
                               "modified_since": "2024-06-01T00:00:00+00:00"}
    assert {"query", "namespace", "mode", "raw_count", "kept_count", "results", "latency_ms",
            "expansions", "notes"} <= set(data)


@pytest.mark.parametrize("argv", [["--modified-since", "last week"], ["--type", "exe"],
                                  ["--path-prefix", "a/../b"], ["--root", ""]])
@pytest.mark.parametrize("command", ["search", "ask", "eval"])
def test_a_bad_filter_is_a_one_line_usage_error(tmp_path, command, argv):
    env = cli_env("http://127.0.0.1:9/api", tmp_path / "home", KBSYNC_EMBED_PROVIDER="hash")
    code, _, err = run_kbsync(env, command, "x", *argv)
    assert code == 2
    assert len(err.strip().splitlines()) <= 2 and "Traceback" not in err  # usage + the error
    assert argv[0] in err


def test_help_types_match_the_converters():
    from kbsync.app.cli_filters import TYPES_HELP

    assert TYPES_HELP == ", ".join(SOURCE_TYPES)


class _Quoting:
    """A chat model (the ``ChatModel`` protocol) that answers by citing passage 1."""

    def complete(self, system: str, user: str, *, max_tokens: int, temperature: float) -> str:
        return "From the context [1]."


def test_ask_searches_with_the_filters_and_echoes_them(kb):
    with api.KnowledgeBase(kb) as base:
        answer = base.ask("What does the policy say?", llm=_Quoting(), min_score=-1.0, k=20,
                          types="pdf")
    assert answer.answered and {h.doc_id for h in answer.results} == {"beta/docs/policy.pdf"}
    assert answer.citations[0].doc_id == "beta/docs/policy.pdf"
    assert answer.to_dict()["filters"]["types"] == ["pdf"]
