"""Rollbacks and the active pointer keep what they should (issue 22, data loss): a rollback
never brings back what ``kbsync remove`` removed, a rolled-back collection keeps the build it
was made with, and a lost pointer is refused (naming the rebuilt collections and
``kbsync rebuild --restore``), never served as an empty knowledge base. After a single
rebuild (issue 37) a lost pointer is recovered from its copy, and with the copy lost too
every command is refused, never served from the replaced collection.

Real ``kbsync`` commands, the rebuild flow on the session's Prefect test server, the
embedded engine, hash embeddings (short documents: one chunk at any budget, so every
rebuild's gate passes).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kbtest import hash_env, run_kbsync, write_tree

TOPICS = ["volcano", "glacier", "harbour", "orchard", "lighthouse", "canyon"]


def _share(root: Path, word: str) -> Path:
    write_tree(root, {f"{t}.md": f"# {t} {word}\n\nThe {t} {word} guide. All about the {t}{word}."
                      for t in TOPICS})
    return root


def _queries(path: Path, root: str = "a") -> Path:
    lines = [json.dumps({"query": f"the {t} guide", "relevant": [f"{root}/{t}.md"]})
             for t in TOPICS]
    path.write_text("\n".join(lines) + "\n")
    return path


def _pointer(home: Path) -> dict | None:
    path = home / "active" / "kbsync.json"
    return json.loads(path.read_text()) if path.exists() else None


def _rebuild(env: dict, queries: Path, **settings: str) -> dict:
    code, report, err = run_kbsync({**env, **settings}, "rebuild", "--queries", str(queries),
                                   "--json")
    assert code == 0 and report["swapped"], err
    return report


@pytest.mark.slow  # 30-75 s on 4 workers (docs/development.md, Tests)
def test_a_rollback_does_not_bring_back_a_removed_root(prefect_api, tmp_path):
    home = tmp_path / "home"
    env = hash_env(prefect_api, home)
    a, b = _share(tmp_path / "a", "alpha"), _share(tmp_path / "b", "beta")
    code, first, err = run_kbsync(env, "ingest", f"a={a}", f"b={b}", "--json")
    assert code == 0 and first["added"] == 2 * len(TOPICS), err
    _rebuild(env, _queries(tmp_path / "q.jsonl"), KBSYNC_CHUNK_TOKENS="64")

    code, removed, err = run_kbsync(env, "remove", "--root", "b", "--yes", "--json")
    assert code == 0 and removed["documents"] == len(TOPICS), err
    # The rule: a removal applies to the previous collection too, and says so.
    assert removed["collection"] == "kbsync__r1"
    assert removed["previous"]["collection"] == "kbsync"
    assert removed["previous"]["documents"] == len(TOPICS)

    code, back, err = run_kbsync(env, "rebuild", "--rollback", "--json")
    assert code == 0 and back["pointer"]["active"] == "kbsync", err
    code, stats, err = run_kbsync(env, "stats", "--json")
    assert stats["collection"] == "kbsync", err
    assert stats["namespaces"]["default"]["documents"] == len(TOPICS)
    code, hits, err = run_kbsync(env, "search", "the orchardbeta", "--root", "b", "--json")
    assert code == 0 and hits["results"] == [], (hits, err)


@pytest.mark.slow  # 30-75 s on 4 workers (docs/development.md, Tests)
def test_a_rolled_back_collection_keeps_its_build(prefect_api, tmp_path):
    home = tmp_path / "home"
    env = hash_env(prefect_api, home)
    a = _share(tmp_path / "a", "alpha")
    code, _, err = run_kbsync(env, "ingest", f"a={a}", "--json")
    assert code == 0, err
    report = _rebuild(env, _queries(tmp_path / "q.jsonl"), KBSYNC_CHUNK_TOKENS="200")
    assert report["plan"]["live_build"]["chunk_tokens"] is None  # the default it was built with
    code, back, err = run_kbsync(env, "rebuild", "--rollback", "--json")
    assert code == 0 and back["pointer"]["active"] == "kbsync", err
    pointer = _pointer(home)
    assert pointer["build"]["chunk_tokens"] is None, pointer
    assert pointer["previous_build"]["chunk_tokens"] == 200, pointer
    # The next plain ingest, even with the rejected setting still in the environment,
    # serves the restored collection with its own build: nothing is re-chunked.
    again_env = {**env, "KBSYNC_CHUNK_TOKENS": "200"}
    code, again, err = run_kbsync(again_env, "ingest", f"a={a}", "--json")
    assert code == 0 and again["collection"] == "kbsync", err
    assert (again["updated"], again["unchanged"]) == (0, len(TOPICS)), again


@pytest.mark.slow  # 30-75 s on 4 workers (docs/development.md, Tests)
def test_a_lost_pointer_is_refused_and_restored(prefect_api, tmp_path):
    home = tmp_path / "home"
    env = hash_env(prefect_api, home)
    a = _share(tmp_path / "a", "alpha")
    queries = _queries(tmp_path / "q.jsonl")
    code, _, err = run_kbsync(env, "ingest", f"a={a}", "--json")
    assert code == 0, err
    _rebuild(env, queries, KBSYNC_CHUNK_TOKENS="64")
    _rebuild(env, queries, KBSYNC_CHUNK_TOKENS="48")
    assert _pointer(home)["active"] == "kbsync__r2"
    (home / "active" / "kbsync.json").unlink()  # lost (or qdrant/ restored without active/)
    (home / "qdrant" / ".active" / "kbsync.json").unlink()  # and its copy (issue 37)

    for args in (["stats"], ["search", "the orchard guide"], ["verify"],
                 ["ingest", f"a={a}"]):
        code, out, err = run_kbsync(env, *args, "--json")
        assert code != 0 and out["error"]["kind"] == "StoreError", (args, code, out, err)
        line = out["error"]["message"]
        assert "kbsync__r1, kbsync__r2" in line, line
        assert "kbsync rebuild --restore kbsync__r2" in line, line
        assert "nothing is indexed" not in err, err
    assert not (home / "qdrant" / "kbsync").exists()  # the ingest built nothing new

    code, restored, err = run_kbsync(env, "rebuild", "--restore", "kbsync__r2", "--json")
    assert code == 0 and restored["pointer"]["active"] == "kbsync__r2", err
    assert restored["pointer"]["previous"] == "kbsync__r1"
    assert restored["pointer"]["build"]["chunk_tokens"] == 48
    code, stats, err = run_kbsync(env, "stats", "--json")
    assert code == 0 and stats["collection"] == "kbsync__r2", err
    assert stats["namespaces"]["default"]["documents"] == len(TOPICS)
    code, again, err = run_kbsync(env, "ingest", f"a={a}", "--json")
    assert code == 0 and again["unchanged"] == len(TOPICS), (again, err)
    code, _, err = run_kbsync(env, "rebuild", "--restore", "other__r1")
    assert code == 2 and "not a collection of kbsync" in err, err


def _refused(env: dict, *args: str) -> str:
    """Run a command that must be refused for the lost pointer; its one error line."""
    code, out, err = run_kbsync(env, *args, "--json")
    assert code != 0 and out["error"]["kind"] == "StoreError", (args, code, out, err)
    line = out["error"]["message"]
    assert "kbsync rebuild --restore kbsync__r1" in line, (args, line)
    assert "and it was replaced by one" in line, (args, line)
    return line


API_SEARCH = ("import sys\nfrom kbsync import api\n"
              "try:\n    api.search('the orchard guide')\n"
              "except Exception as exc:\n    print(type(exc).__name__, exc)\n    sys.exit(1)\n")


@pytest.mark.slow  # 30-75 s on 4 workers (docs/development.md, Tests)
def test_a_lost_pointer_after_one_rebuild_is_recovered_or_refused(prefect_api, tmp_path):
    import subprocess
    import sys

    home = tmp_path / "home"
    env = hash_env(prefect_api, home)
    a = _share(tmp_path / "a", "alpha")
    code, _, err = run_kbsync(env, "ingest", f"a={a}", "--json")
    assert code == 0, err
    _rebuild(env, _queries(tmp_path / "q.jsonl"), KBSYNC_CHUNK_TOKENS="64")
    # A sync after the swap: one document deleted, one added (the old collection has neither).
    (a / "volcano.md").unlink()
    write_tree(a, {"zeppelin.md": "# zeppelin alpha\n\nThe zeppelin hangar manual."})
    code, synced, err = run_kbsync(env, "ingest", f"a={a}", "--mode", "full", "--json")
    assert code == 0 and (synced["added"], synced["deleted"]) == (1, 1), (synced, err)
    pointer = home / "active" / "kbsync.json"
    mirror = home / "qdrant" / ".active" / "kbsync.json"
    assert json.loads(mirror.read_text()) == _pointer(home)

    # The pointer lost, its copy intact: recovered, with one warning, and written back.
    pointer.unlink()
    code, stats, err = run_kbsync(env, "stats", "--json")
    assert code == 0 and stats["collection"] == "kbsync__r1", err
    assert "was lost: recovered from its copy" in err, err
    assert stats["namespaces"]["default"]["documents"] == len(TOPICS)
    assert _pointer(home)["active"] == "kbsync__r1"
    code, hits, err = run_kbsync(env, "search", "zeppelin hangar manual", "--json")
    assert code == 0 and hits["results"][0]["doc_id"] == "a/zeppelin.md", err

    # Both lost: every door refuses with one line naming --restore; nothing is written.
    pointer.unlink()
    mirror.unlink()
    before = sorted(p.name for p in (home / "qdrant").iterdir())
    for args in (["stats"], ["search", "the orchard guide"], ["verify"], ["verify", "--repair"],
                 ["ingest", f"a={a}"], ["remove", "--root", "a", "--yes"],
                 ["rebuild", "--queries", str(tmp_path / "q.jsonl")], ["rebuild", "--rollback"]):
        _refused(env, *args)
    api = subprocess.run([sys.executable, "-c", API_SEARCH], env=env, capture_output=True,
                         text=True, timeout=300)
    assert api.returncode == 1 and api.stdout.startswith("StoreError"), (api.stdout, api.stderr)
    assert "kbsync rebuild --restore kbsync__r1" in api.stdout, api.stdout
    assert sorted(p.name for p in (home / "qdrant").iterdir()) == before
    assert _pointer(home) is None

    code, restored, err = run_kbsync(env, "rebuild", "--restore", "kbsync__r1", "--json")
    assert code == 0 and restored["pointer"]["active"] == "kbsync__r1", err
    assert restored["pointer"]["previous"] == "kbsync"
    code, again, err = run_kbsync(env, "ingest", f"a={a}", "--json")
    assert code == 0 and again["collection"] == "kbsync__r1", (again, err)
    assert again["unchanged"] == len(TOPICS), again
    code, hits, err = run_kbsync(env, "search", "the volcanoalpha guide", "--json")
    assert code == 0 and "a/volcano.md" not in [h["doc_id"] for h in hits["results"]], hits
