"""The README's main job through the real ``kbsync`` command, end to end.

Subprocesses talk to the session's Prefect test server (PREFECT_API_URL) so they
don't each start a temporary one. The first test uses the default local model.
"""

from __future__ import annotations

import os
import shutil

import pytest

from kbsync.settings import DEFAULT_LOCAL_MODEL
from kbtest import SAMPLE, cli_env, run_kbsync

_env = cli_env
kbsync = run_kbsync


@pytest.mark.slow
def test_ingest_search_stats_with_the_local_model(prefect_api, tmp_path):
    env = _env(prefect_api, tmp_path / "home")
    share = tmp_path / "sample"
    shutil.copytree(SAMPLE, share)
    code, first, err = kbsync(env, "ingest", str(share), "--json")
    assert code == 0, err
    assert first["added"] == first["files_seen"] > 10 and first["failed"] == 0
    assert (first["added"] + first["updated"] + first["unchanged"] + first["failed"]
            == first["files_seen"])

    code, hits, err = kbsync(env, "search", "rotate API keys", "-k", "3", "--json")
    assert code == 0, err
    assert set(hits) >= {"query", "namespace", "mode", "raw_count", "kept_count", "results"}
    assert hits["raw_count"] == 12 and 0 < len(hits["results"]) <= 3
    top = hits["results"][0]
    assert set(top) == {"rank", "score", "doc_id", "path", "chunk_index", "heading_path",
                        "page_start", "page_end", "text"}
    assert "key" in top["text"].lower()

    code, again, err = kbsync(env, "ingest", str(share), "--json")
    assert code == 0, err
    assert again["unchanged"] == again["files_seen"] and again["embeddings_computed"] == 0

    code, stats, err = kbsync(env, "stats", "--json")
    assert code == 0, err
    assert stats["embedding"] == {"provider": "local", "model": DEFAULT_LOCAL_MODEL,
                                  "dimension": 384}
    assert stats["namespaces"]["default"]["documents"] == first["files_seen"]
    assert stats["namespaces"]["default"]["chunks"] == first["chunks_kept"]


@pytest.mark.slow  # 30-75 s on 4 workers (docs/development.md, Tests)
def test_exit_codes(prefect_api, tmp_path):
    env = _env(prefect_api, tmp_path / "home", KBSYNC_EMBED_PROVIDER="hash")
    code, _, err = kbsync(env, "ingest", str(tmp_path / "missing"), "--json")
    assert code == 2 and "does not exist" in err
    code, _, err = kbsync(env, "search", "x", "-k", "0")
    assert code == 2
    share = tmp_path / "share"
    share.mkdir()
    (share / "good.md").write_text("# Good\n\nSome text.", encoding="utf-8")
    (share / "bad.docx").write_bytes(os.urandom(512))
    code, summary, err = kbsync(env, "ingest", str(share), "--json")
    assert code == 3, err
    assert summary["added"] == 1 and summary["failed"] == 1
    assert summary["failures"][0]["error"] == "CorruptDocument"
