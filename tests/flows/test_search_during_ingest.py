"""``kbsync search`` and ``stats`` while a real ``kbsync ingest`` flow runs (issue 11 part 7).

The ingest flow's process holds the embedded store for the whole run and serves
reads on its relay socket; the readers are separate ``kbsync`` processes.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from kbsync.store.edge.relay import socket_path
from kbtest import KBSYNC, hash_env, write_tree

FILES = 400


def _read(env: dict, *args: str) -> tuple[int, dict | None, str]:
    proc = subprocess.run([KBSYNC, *args, "--json"], env=env, capture_output=True, text=True,
                          timeout=300)
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else None, proc.stderr


@pytest.mark.slow
def test_search_and_stats_answer_while_kbsync_ingest_runs(prefect_api, tmp_path):
    share, home = tmp_path / "share", tmp_path / "home"
    write_tree(share, {f"d{i % 9}/n{i}.md": f"# Note {i}\n\nrotate the key of tenant {i}. "
                       f"marker{i} policy backup.\n" for i in range(FILES)})
    env = hash_env(prefect_api, home, KBSYNC_FILES_PER_BATCH="4")
    ingest = subprocess.Popen([KBSYNC, "ingest", str(share), "--json"], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        sock = socket_path(home, home / "qdrant")
        deadline = time.monotonic() + 300
        while not sock.exists():  # the flow opened the store and serves it
            assert ingest.poll() is None, ingest.communicate()[1]
            assert time.monotonic() < deadline
            time.sleep(0.2)
        code, stats, err = _read(env, "stats")
        assert code == 0, err
        assert stats["collection"] == "kbsync"
        while not stats["namespaces"].get("default", {}).get("chunks"):  # first batch in
            assert ingest.poll() is None, "the ingest ended before any read was served"
            code, stats, err = _read(env, "stats")
            assert code == 0, err
        code, hits, err = _read(env, "search", "rotate the key")
        assert code == 0, err
        assert hits["results"] and hits["results"][0]["doc_id"].startswith("share/")
        assert ingest.poll() is None, "the ingest ended before the readers did"
        out, err = ingest.communicate(timeout=900)
    finally:
        if ingest.poll() is None:
            ingest.kill()
            ingest.communicate()
    assert ingest.returncode == 0, err
    summary = json.loads(out)
    assert summary["added"] == FILES and summary["failed"] == 0
    assert not sock.exists()
    code, stats, err = _read(env, "stats")  # the store is free again: opened directly
    assert code == 0, err
    assert stats["namespaces"]["default"]["documents"] == FILES
