"""Hybrid search through the real write path (files -> ingest -> edge store -> search).

Uses the hash embedder (``runtime`` fixture): deterministic, and lexical
enough that the failure mode of dense search can be built on purpose.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kbsync
from kbtest import write_tree
from kbsync.app.cli import main
from kbsync.ingest.discover import parse_root
from kbsync.errors import StoreError
from kbsync.ingest.runner import run_plain
from kbsync.query.search import SearchMode, search

TOPICS = ["upload", "storage", "billing", "login", "export", "sync", "backup", "quota", "email",
          "webhook", "invoice", "report", "team", "token"]
RUNBOOK = "share/runbook/uploader.md"


def faq_share(root: Path) -> None:
    """Short FAQ pages that share only function words with the question, and one long
    runbook page that mentions the error code once (so its dense vector is diluted)."""
    files = {f"faq/{t}.md": f"# The {t} step\n\nIt is the {t} step. It is on the {t} page, and "
                            "it is the one to retry." for t in TOPICS}
    files["runbook/uploader.md"] = "# Uploader runbook\n\n" + " ".join(
        f"Step {j}: check the uploader queue depth, the worker pool and the bucket policy."
        for j in range(8)) + " When the uploader logs ERR_7Q4Z the signing key has expired: " \
                            "rotate it with keyctl."
    files["zh/faq.md"] = "# 常见问题\n\n如何申请发票？请在账单页面提交申请。"
    files["zh/runbook.md"] = "# 运维手册\n\n密钥轮换：每九十天使用 keyctl 工具轮换一次签名密钥。"
    write_tree(root, files)


@pytest.fixture
def ingested(runtime, tmp_path):
    faq_share(tmp_path / "share")
    summary = run_plain([parse_root(str(tmp_path / "share"))], runtime=runtime).to_dict()
    assert summary["added"] == len(TOPICS) + 3 and not summary["failures"]
    return runtime


def run_search(runtime, query: str, **options):
    return search(query, store=runtime.store, service=runtime.service,
                  collection=runtime.collection, **options)


def test_hybrid_finds_the_error_code_dense_misses(ingested) -> None:
    question = "what is the ERR_7Q4Z error"
    dense = run_search(ingested, question, k=5, mode="dense")
    assert RUNBOOK not in [h.doc_id for h in dense.results]
    hybrid = run_search(ingested, question, k=5, mode="hybrid")
    assert hybrid.mode == "hybrid"
    assert hybrid.results[0].doc_id == RUNBOOK
    # 17 one-chunk documents, fewer than k * 4: both prefetches see all, the fusion keeps all.
    assert hybrid.raw_count == dense.raw_count == len(TOPICS) + 3
    assert hybrid.results[0].score > hybrid.results[1].score
    assert "ERR_7Q4Z" in hybrid.results[0].text


def test_hybrid_handles_chinese_queries(ingested) -> None:
    hybrid = run_search(ingested, "密钥轮换", k=3, mode=SearchMode.HYBRID)
    assert hybrid.results[0].doc_id == "share/zh/runbook.md"


def test_a_query_with_no_terms_still_searches_dense(ingested) -> None:
    # Only stop words: the sparse query is empty, the fused list is the dense one.
    hybrid = run_search(ingested, "is it the one", k=3, mode="hybrid")
    dense = run_search(ingested, "is it the one", k=20, mode="dense")
    cosine = {h.doc_id: h.score for h in dense.results}
    # The FAQ pages tie exactly in dense score, and the engine orders ties its own way:
    # compare by cosine, not by which of the tied pages came first.
    assert [cosine[h.doc_id] for h in hybrid.results] == [h.score for h in dense.results[:3]]


def test_hybrid_on_a_collection_without_sparse_vectors_explains(runtime) -> None:
    runtime.store.ensure_collection("older", dimension=runtime.service.dimension)
    with pytest.raises(StoreError, match="no sparse vector.*kbsync ingest.*--mode dense"):
        search("anything", store=runtime.store, service=runtime.service, collection="older",
               mode="hybrid")


def test_bad_mode_refused(ingested) -> None:
    with pytest.raises(ValueError):
        run_search(ingested, "x", mode="sparse")


def test_cli_search_hybrid_json_adds_fields_only(ingested, capsys) -> None:
    ingested.close()  # the CLI opens the embedded store itself
    assert main(["search", "what is the ERR_7Q4Z error", "--mode", "hybrid", "-k", "5",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"query", "namespace", "mode", "raw_count", "kept_count", "results",
                         "latency_ms", "expansions", "notes", "filters"}  # filters: #13.4
    assert data["mode"] == "hybrid" and data["results"][0]["doc_id"] == RUNBOOK
    assert data["expansions"] == [] and data["notes"] == []
    assert set(data["results"][0]) >= {"doc_id", "path", "heading_path", "page_start",
                                       "page_end", "chunk_index", "score", "text", "rank"}


def test_cli_search_readable_prints_citations_and_notes(ingested, capsys) -> None:
    ingested.close()
    assert main(["search", "ERR_7Q4Z", "--mode", "hybrid", "--mqe", "2", "-k", "2"]) == 0
    out = capsys.readouterr().out
    assert '[1] share/runbook/uploader.md, "Uploader runbook"' in out
    assert "note: query expansion (mqe/hyde) skipped: no chat model configured" in out


def test_public_api_opens_what_it_is_not_given(ingested, settings) -> None:
    ingested.close()
    result = kbsync.search("ERR_7Q4Z", k=2, mode="hybrid", settings=settings)
    assert isinstance(result, kbsync.SearchResult)
    assert result.results[0].doc_id == RUNBOOK
    assert kbsync.citation(result.results[0]).startswith("[1] share/runbook/uploader.md")
    again = kbsync.search("ERR_7Q4Z", k=2, mode="hybrid", settings=settings)  # store released
    assert [h.doc_id for h in again.results] == [h.doc_id for h in result.results]
