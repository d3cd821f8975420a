"""``kbsync rebuild`` (issue 16.2) through the real command, the rebuild flow on the
session's Prefect test server and the embedded engine.

Hash embeddings keep it fast: the tests are about the mechanism (shadow, gate, pointer,
rollback, crash). The worse setting that must lose is a 4-dimensional hash embedding
(dense mode), against the live 384-dimensional one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from kbtest import (TOPICS, active_pointer, hash_env, run_kbsync, start_kbsync, topic_queries,
                    topic_share, write_tree)


def _collections(home: Path) -> set[str]:
    return {p.name for p in (home / "qdrant").iterdir() if p.is_dir()}


@pytest.mark.slow  # 30-75 s on 4 workers (docs/development.md, Tests)
def test_rebuild_swaps_when_no_worse_then_rolls_back(prefect_api, tmp_path):
    home = tmp_path / "home"
    env = hash_env(prefect_api, home)
    share = topic_share(tmp_path / "share", sites=True)
    queries = topic_queries(tmp_path / "q.jsonl")
    code, first, err = run_kbsync(env, "ingest", f"share={share}", "--json")
    assert code == 0 and first["added"] == len(TOPICS), err

    # New chunking (a smaller budget), same model: as good on these queries.
    new = {**env, "KBSYNC_CHUNK_TOKENS": "64", "KBSYNC_CHUNK_OVERLAP": "8"}
    code, report, err = run_kbsync(new, "rebuild", "--queries", str(queries), "--json")
    assert code == 0 and report["swapped"], err
    decision = report["decision"]
    assert decision["swap"] and not decision["reasons"] and set(decision["modes"]) == {
        "dense", "hybrid"}
    for mode, m in decision["modes"].items():
        assert m["ok"] and m["delta"] >= -0.02, (mode, m)
        assert report["live"]["modes"][mode]["ndcg@10"] == m["live"]
        assert report["shadow"]["modes"][mode]["ndcg@10"] == m["shadow"]
    assert report["live"]["collection"] == "kbsync"
    assert report["shadow"]["collection"] == "kbsync__r1"
    assert report["state"]["matches"] and report["duration_s"] > 0
    assert set(report["timings"]) == {"build_s", "eval_s", "swap_s"}
    built = report["ingest"]["default"]
    assert built["added"] == len(TOPICS)
    # Same model, texts unchanged (short documents are one chunk either way): every vector
    # comes from the embedding cache.
    assert (built["embeddings_computed"], built["embeddings_cached"]) == (0, built["chunks_kept"])
    assert report["replay"]["default"]["unchanged"] == len(TOPICS)  # nothing changed meanwhile
    pointer = active_pointer(home)
    assert pointer["active"] == "kbsync__r1" and pointer["previous"] == "kbsync"
    assert pointer["build"]["chunk_tokens"] == 64

    # Every command now serves the shadow, with its build settings: the environment
    # without KBSYNC_CHUNK_TOKENS sees nothing to reprocess (same fingerprint).
    code, stats, err = run_kbsync(env, "stats", "--json")
    assert stats["collection"] == "kbsync__r1", err
    assert stats["namespaces"]["default"]["documents"] == len(TOPICS)
    code, again, err = run_kbsync(env, "ingest", f"share={share}", "--json")
    assert code == 0 and again["collection"] == "kbsync__r1", err
    assert (again["unchanged"], again["updated"]) == (len(TOPICS), 0), again
    code, hits, err = run_kbsync(env, "search", "the orchard3 site", "--json")
    assert code == 0 and hits["results"][0]["doc_id"] == "share/d0/orchard3.md", err
    code, evaluated, err = run_kbsync(env, "eval", str(queries), "--json", "--modes", "dense",
                                      "--report-dir", str(tmp_path / "reports"))
    assert code == 0 and evaluated["modes"]["dense"]["ndcg@10"] == decision["modes"]["dense"][
        "shadow"], err

    code, back, err = run_kbsync(env, "rebuild", "--rollback", "--json")
    assert code == 0 and back["rolled_back"], err
    assert back["pointer"]["active"] == "kbsync" and back["pointer"]["previous"] == "kbsync__r1"
    code, stats, err = run_kbsync(env, "stats", "--json")
    assert stats["collection"] == "kbsync", err
    assert {"kbsync", "kbsync__r1"} <= _collections(home)  # both kept for another rollback


@pytest.mark.slow  # 30-75 s on 4 workers (docs/development.md, Tests)
def test_rebuild_refuses_a_worse_model_and_keeps_the_live_collection(prefect_api, tmp_path):
    home = tmp_path / "home"
    env = hash_env(prefect_api, home)
    share = topic_share(tmp_path / "share", sites=True)
    queries = topic_queries(tmp_path / "q.jsonl")
    code, _, err = run_kbsync(env, "ingest", f"share={share}", "--json")
    assert code == 0, err
    worse = {**env, "KBSYNC_EMBED_DIMENSIONS": "4"}  # 4-dim hash vectors collide
    code, report, err = run_kbsync(worse, "rebuild", "--queries", str(queries), "--modes",
                                   "dense", "--json")
    assert code == 3 and not report["swapped"], err
    dense = report["decision"]["modes"]["dense"]
    assert dense["shadow"] < dense["live"] - 0.02 and not dense["ok"], dense
    assert "kbsync: rebuild refused: dense: nDCG@10" in err
    assert report["shadow"]["embedding"]["dimension"] == 4
    assert report["live"]["embedding"]["dimension"] == 384
    assert active_pointer(home) is None
    assert "kbsync__r1" not in _collections(home)  # the refused shadow is discarded
    code, stats, err = run_kbsync(env, "stats", "--json")
    assert stats["collection"] == "kbsync" and stats["namespaces"]["default"]["documents"] == \
        len(TOPICS), err


def _wait_for(path: Path, proc: subprocess.Popen, timeout_s: float = 300,
              text: str | None = None) -> None:
    """Until ``path`` exists (and holds ``text``, when given) while ``proc`` runs."""
    deadline = time.monotonic() + timeout_s
    while not path.exists() or (text and text not in path.read_text(errors="replace")):
        assert proc.poll() is None, f"the rebuild ended before {path} showed {text}"
        assert time.monotonic() < deadline, f"{path} never showed {text}"
        time.sleep(0.05)


@pytest.mark.slow
def test_kill_9_during_rebuild_leaves_live_serving_and_resumes(prefect_api, tmp_path):
    home = tmp_path / "home"
    env = hash_env(prefect_api, home, KBSYNC_FILES_PER_BATCH="8")
    share = topic_share(tmp_path / "share", 240, filler=6, sites=True)
    queries = topic_queries(tmp_path / "q.jsonl")
    code, first, err = run_kbsync(env, "ingest", f"share={share}", "--json")
    assert code == 0 and first["added"] == 240, err
    new = {**env, "KBSYNC_CHUNK_TOKENS": "48", "KBSYNC_CHUNK_OVERLAP": "8"}
    log = tmp_path / "1.err"
    proc = start_kbsync(new, "-v", "rebuild", "--queries", str(queries), "--json", log=log)
    # Killed in the middle of the shadow's batches (the runner logs each one done, -v).
    _wait_for(log, proc, text="root share: batch 2/")
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    assert active_pointer(home) is None  # the swap never happened: live untouched
    code, stats, err = run_kbsync(env, "stats", "--json")
    assert stats["collection"] == "kbsync", err
    assert stats["namespaces"]["default"]["documents"] == 240
    code, hits, err = run_kbsync(env, "search", "the orchard3 site", "--json")
    assert code == 0 and hits["results"][0]["doc_id"] == "share/d0/orchard3.md", err

    code, report, err = run_kbsync(new, "rebuild", "--queries", str(queries), "--json")
    assert code == 0 and report["swapped"], err
    assert report["plan"]["shadow"] == "kbsync__r1" and report["plan"]["resumed"]
    done = report["ingest"]["default"]
    assert done["unchanged"] >= 16 and done["added"] + done["unchanged"] == 240, done
    assert report["state"]["matches"]
    code, stats, err = run_kbsync(env, "stats", "--json")
    assert stats["collection"] == "kbsync__r1", err
    assert stats["namespaces"]["default"]["documents"] == 240


@pytest.mark.slow
def test_changes_during_a_rebuild_reach_the_shadow_and_search_stays_up(prefect_api, tmp_path):
    home = tmp_path / "home"
    env = hash_env(prefect_api, home, KBSYNC_FILES_PER_BATCH="8")
    share = topic_share(tmp_path / "share", 240, filler=6, sites=True)
    queries = topic_queries(tmp_path / "q.jsonl")
    code, _, err = run_kbsync(env, "ingest", f"share={share}", "--json")
    assert code == 0, err
    new = {**env, "KBSYNC_CHUNK_TOKENS": "48", "KBSYNC_CHUNK_OVERLAP": "8"}
    proc = start_kbsync(new, "rebuild", "--queries", str(queries), "--json",
                        log=tmp_path / "r.err")
    _wait_for(home / "qdrant" / "kbsync__r1", proc)
    # Search is served by the live collection meanwhile (through the rebuild's relay).
    code, hits, err = run_kbsync(env, "search", "the orchard3 site", "--json")
    assert code == 0 and hits["results"][0]["doc_id"] == "share/d0/orchard3.md", err
    # A sync of the embedded store waits for the rebuild (one writer); it is refused at
    # once without KBSYNC_LOCK_TIMEOUT_S, naming the rebuild.
    write_tree(share, {"late/zeppelin.md": "# zeppelin\n\nThe zeppelin hangar manual."})
    code, out, err = run_kbsync(env, "ingest", f"share={share}", "--json")
    assert code == 1 and out["error"]["kind"] == "LockHeld", err
    assert "a rebuild of namespace 'default'" in err, err
    stdout, _ = proc.communicate(timeout=600)
    report = json.loads(stdout)
    assert proc.returncode == 0 and report["swapped"], (tmp_path / "r.err").read_text()
    assert report["state"]["matches"]
    code, hits, err = run_kbsync(env, "search", "zeppelin hangar manual", "--json")
    assert code == 0 and hits["results"][0]["doc_id"] == "share/late/zeppelin.md", err
    code, stats, err = run_kbsync(env, "stats", "--json")
    assert stats["collection"] == "kbsync__r1", err
    assert stats["namespaces"]["default"]["documents"] == 241
