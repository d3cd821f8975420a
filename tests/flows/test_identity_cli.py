"""Root bindings and embedder identity (issue 10.2, 10.4) through the real ``kbsync``
command and the ingest flow on the session's Prefect test server."""

from __future__ import annotations

import json

import pytest

from kbsync.settings import DEFAULT_LOCAL_MODEL
from kbtest import hash_env, run_kbsync, write_tree

kbsync = run_kbsync


def _one_line_error(err: str) -> str:
    """The error line on stderr; there must be exactly one and no traceback."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("kbsync: error:")]
    assert len(lines) == 1, err
    return lines[0]


def _refused(out: dict | None, kind: str) -> None:
    """A failed command prints nothing on stdout, or the JSON error object of ``kind``."""
    assert out is None or out["error"]["kind"] == kind, out


def _docs(names, tag):
    return {f"{n}.md": f"# {n} from {tag}\n\nBody of {n} in share {tag}." for n in names}


@pytest.mark.slow  # 30-75 s on 4 workers (docs/development.md, Tests)
def test_two_shares_with_one_folder_name(prefect_api, tmp_path):
    env = hash_env(prefect_api, tmp_path / "home")
    x, y = tmp_path / "x" / "docs", tmp_path / "y" / "docs"
    write_tree(x, _docs([f"f{i}" for i in range(10)], "x"))
    write_tree(y, _docs([f"f{i}" for i in range(6)] + ["y6", "y7"], "y"))
    code, first, err = kbsync(env, "ingest", str(x), "--json")
    assert code == 0 and first["added"] == 10, err
    for extra in ([], ["--mode", "full"]):
        code, out, err = kbsync(env, "ingest", str(y), "--json", *extra)
        line = _one_line_error(err)
        assert code == 2
        _refused(out, "RootConflict")
        assert str(x) in line and str(y) in line and "--rebind" in line and "docs2=" in line
    code, stats, err = kbsync(env, "stats", "--json")
    assert stats["namespaces"]["default"]["documents"] == 10, err
    code, hits, err = kbsync(env, "search", "Body of f7", "--mode", "dense", "--json")
    assert code == 0 and any(h["doc_id"] == "docs/f7.md" for h in hits["results"]), err

    # A share that really moved: --rebind keeps the documents.
    code, moved, err = kbsync(env, "ingest", str(y), "--rebind", "--json")
    assert code == 0, err
    assert (moved["updated"], moved["added"]) == (6, 2) and moved["warnings"], moved
    code, again, err = kbsync(env, "ingest", str(y), "--json")
    assert code == 0 and again["unchanged"] == 8, err

    # Overlapping roots and a root holding KBSYNC_HOME: refused before any run starts.
    code, _, err = kbsync(env, "ingest", str(tmp_path / "x"), str(x), "--json")
    assert code == 2 and "overlap" in _one_line_error(err)
    code, _, err = kbsync(env, "ingest", str(tmp_path), "--json")
    assert code == 2 and "KBSYNC_HOME" in _one_line_error(err)
    code, _, err = kbsync(env, "ingest", "docs=", "--json")
    assert code == 2 and "empty path" in _one_line_error(err)


@pytest.mark.slow
def test_search_with_another_384_dim_model_is_refused(prefect_api, tmp_path):
    env = hash_env(prefect_api, tmp_path / "home")
    write_tree(tmp_path / "share", _docs(["keys", "deploy"], "s"))
    code, _, err = kbsync(env, "ingest", str(tmp_path / "share"), "--json")
    assert code == 0, err
    local = {**env, "KBSYNC_EMBED_PROVIDER": "local"}
    code, out, err = kbsync(local, "search", "rotate keys", "--mode", "dense", "--json")
    line = _one_line_error(err)
    assert code == 2
    _refused(out, "EmbedderMismatch")
    assert "hash/hash-384" in line and "local/all-MiniLM-L6-v2" in line
    code, out, err = kbsync(local, "ingest", str(tmp_path / "share"), "--force", "--json")
    assert code == 2 and "KBSYNC_COLLECTION" in _one_line_error(err)
    queries = tmp_path / "q.jsonl"
    queries.write_text(json.dumps({"query": "rotate keys", "relevant": ["share/keys.md"]}) + "\n",
                       encoding="utf-8")
    code, out, err = kbsync(local, "eval", str(queries), "--report-dir", str(tmp_path / "r"),
                            "--json")
    assert code == 2 and "hash/hash-384" in _one_line_error(err)
    # ask refuses before the chat model is called (nothing listens on this port).
    chat = {**local, "KBSYNC_LLM_MODEL": "m", "KBSYNC_LLM_BASE_URL": "http://127.0.0.1:9/v1"}
    code, out, err = kbsync(chat, "ask", "how do keys rotate?", "--json")
    assert code == 2 and "hash/hash-384" in _one_line_error(err)
    code, stats, err = kbsync(local, "stats", "--json")
    assert code == 0, err
    assert stats["embedding"] == {"provider": "hash", "model": "hash-384", "dimension": 384}
    assert stats["configured_embedding"] == {"provider": "local", "model": DEFAULT_LOCAL_MODEL}
