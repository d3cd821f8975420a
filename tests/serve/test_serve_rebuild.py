"""``kbsync serve`` follows the active collection (issue 40): a rebuild that swaps in a shadow,
and a rollback that swaps back, are answered from at the next request, with no restart, while
searches go on without an error."""

from __future__ import annotations

import threading

import pytest

from kbtest import TOPICS, topic_queries, topic_share
from serving import Server, kbsync, serve_env

from kbsync.serve.client import ServerClient


@pytest.mark.slow  # ~1-2 minutes: an ingest, a rebuild and a rollback through Prefect
def test_a_rebuild_and_a_rollback_are_served_without_a_restart(prefect_api, tmp_path) -> None:
    env = serve_env(tmp_path / "home", prefect_api)
    share = topic_share(tmp_path / "share", sites=True)
    queries = topic_queries(tmp_path / "q.jsonl")
    done = kbsync(env, "ingest", f"share={share}", "--json", timeout=600)
    assert done.returncode == 0, done.stderr
    sock = tmp_path / "kb.sock"
    with Server(env, "--socket", str(sock)) as server:
        client = ServerClient(unix=sock)
        assert client.stats({})["collection"] == "kbsync"
        stop, errors, answered = threading.Event(), [], [0]

        def hammer() -> None:
            with ServerClient(unix=sock) as mine:
                while not stop.is_set():
                    try:
                        mine.search({"query": "the orchard3 site", "k": 3})
                        answered[0] += 1
                    except Exception as exc:  # noqa: BLE001 - asserted none below
                        errors.append(exc)
        thread = threading.Thread(target=hammer)
        thread.start()
        try:
            new = {**env, "KBSYNC_CHUNK_TOKENS": "64", "KBSYNC_CHUNK_OVERLAP": "8"}
            done = kbsync(new, "rebuild", "--queries", str(queries), "--json", timeout=600)
            assert done.returncode == 0, done.stderr + server.seen()
            stats = client.stats({})
            assert stats["collection"] == "kbsync__r1"
            assert stats["namespaces"]["default"]["documents"] == len(TOPICS)
            done = kbsync(env, "rebuild", "--rollback", "--json", timeout=600)
            assert done.returncode == 0, done.stderr + server.seen()
            assert client.stats({})["collection"] == "kbsync"
        finally:
            stop.set()
            thread.join(60)
        assert errors == [] and answered[0] > 0, server.seen()
        hits = client.search({"query": "the orchard3 site", "k": 1})["results"]
        assert hits[0]["doc_id"] == "share/d0/orchard3.md"
