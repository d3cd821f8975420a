"""A ``kbsync remove`` that waited for a rebuild applies to the collection the rebuild made
active, not to the one it replaced (issue 37): the writer resolves the pointer again once
it holds the write lock (:meth:`kbsync.catalog.lock.WriteLocks.hold`).

Real ``kbsync`` commands, the rebuild flow on the session's Prefect test server, the
embedded engine (the rebuild holds the store's write lock throughout), hash embeddings.
The test waits on events: the rebuild's holder record in the lock file, then the remove's
own "waiting for the write lock" warning; never on time.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from kbsync.catalog.lock import probe
from kbtest import hash_env, run_kbsync, start_kbsync, write_tree

pytestmark = pytest.mark.slow  # a rebuild and a waiting remove: about a minute

G = 60  # documents of the removed root (the g50)


def _wait_for(check, proc, what: str, *, bound_s: float = 300) -> None:
    deadline = time.monotonic() + bound_s
    while not check():
        assert proc.poll() is None, f"the command ended before {what}"
        assert time.monotonic() < deadline, f"never saw {what}"
        time.sleep(0.05)


def test_a_remove_that_waited_for_a_rebuild_applies_to_the_new_collection(prefect_api,
                                                                            tmp_path):
    home = tmp_path / "home"
    env = hash_env(prefect_api, home)
    a, g = tmp_path / "a", tmp_path / "g"
    write_tree(a, {f"t{i}.md": f"# topic{i}\n\nThe topic{i} guide." for i in range(6)})
    write_tree(g, {f"g{i}.md": f"# gadget{i}\n\nThe gadget{i} manual." for i in range(G)})
    queries = tmp_path / "q.jsonl"
    queries.write_text("".join(json.dumps({"query": f"the topic{i} guide",
                                           "relevant": [f"a/t{i}.md"]}) + "\n"
                               for i in range(6)))
    code, first, err = run_kbsync(env, "ingest", f"a={a}", f"g={g}", "--json")
    assert code == 0 and first["added"] == 6 + G, err

    rebuild = start_kbsync({**env, "KBSYNC_CHUNK_TOKENS": "64"}, "rebuild", "--queries",
                           str(queries), "--json", log=tmp_path / "rebuild.err")
    lock = home / "locks" / "embedded-store.all.lock"
    _wait_for(lambda: (h := probe(lock)) is not None and h.purpose == "rebuild", rebuild,
              "the rebuild holding the write lock")
    log = tmp_path / "remove.err"
    remove = start_kbsync({**env, "KBSYNC_LOCK_TIMEOUT_S": "300"}, "remove", "--root", "g",
                          "--yes", "--json", log=log)
    _wait_for(lambda: "waiting for the write lock held by a rebuild" in log.read_text(), remove,
              "the remove waiting for the rebuild")

    stdout, _ = rebuild.communicate(timeout=600)
    assert rebuild.returncode == 0 and json.loads(stdout)["swapped"], (
        (tmp_path / "rebuild.err").read_text())
    stdout, _ = remove.communicate(timeout=600)
    err = log.read_text()
    assert remove.returncode == 0, err
    removed = json.loads(stdout)
    # It resolved kbsync before the wait and kbsync__r1 once it held the lock.
    assert "now serves from kbsync__r1, not kbsync" in err, err
    assert (removed["collection"], removed["documents"]) == ("kbsync__r1", G), removed
    assert removed["previous"]["collection"] == "kbsync"  # and the rollback target too

    code, stats, err = run_kbsync(env, "stats", "--json")
    assert code == 0 and stats["collection"] == "kbsync__r1", err
    assert stats["namespaces"]["default"]["documents"] == 6, stats
    code, hits, err = run_kbsync(env, "search", "the gadget7 manual", "--root", "g", "--json")
    assert code == 0 and hits["results"] == [], (hits, err)
