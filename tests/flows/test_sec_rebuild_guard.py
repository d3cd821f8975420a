"""A rebuild never loses a root and never passes what it could not measure (issue 22, data
loss): a temporarily empty share refuses it (full mode's mass-delete guard, against the LIVE
collection), a gate whose queries find none of their relevant documents refuses, a sync
started during a rebuild waits for the whole of it, and a rebuild during an ingest is
``LockHeld``.

Real ``kbsync`` commands, the rebuild flow on the session's Prefect test server, the
embedded engine, hash embeddings. Waits are on events (a log line), never sleeps.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from fake_openai import FakeOpenAIServer
from kbtest import (TOPICS, active_pointer, hash_env, run_kbsync, start_kbsync, topic_queries,
                    topic_share, write_tree)


def _wait_for(log: Path, proc: subprocess.Popen, text: str, timeout_s: float = 300) -> None:
    """Until ``log`` holds ``text`` while ``proc`` runs (an event, not a guess of time)."""
    deadline = time.monotonic() + timeout_s
    while not log.exists() or text not in log.read_text(errors="replace"):
        assert proc.poll() is None, f"{proc.args} ended before its log showed {text!r}: " + (
            log.read_text(errors="replace")[-2000:])
        assert time.monotonic() < deadline, f"{log} never showed {text!r}"
        time.sleep(0.05)


@pytest.mark.slow  # 30-75 s on 4 workers (docs/development.md, Tests)
def test_a_rebuild_refuses_a_temporarily_empty_root(prefect_api, tmp_path):
    home = tmp_path / "home"
    env = hash_env(prefect_api, home)
    share, other = topic_share(tmp_path / "share"), topic_share(tmp_path / "other")
    code, first, err = run_kbsync(env, "ingest", f"share={share}", f"other={other}", "--json")
    assert code == 0 and first["added"] == 2 * len(TOPICS), err
    for path in sorted(other.rglob("*.md")):  # unmounted: an empty folder
        path.unlink()
    code, out, err = run_kbsync({**env, "KBSYNC_CHUNK_TOKENS": "64"}, "rebuild", "--queries",
                                str(topic_queries(tmp_path / "q.jsonl")), "--json")
    assert code != 0 and out["error"]["kind"] == "MassDeleteRefused", (code, out, err)
    line = out["error"]["message"]
    assert "root other" in line and "holds no files" in line and "nothing was built" in line
    assert "kbsync remove --root NAME" in line, line
    assert active_pointer(home) is None
    assert not (home / "qdrant" / "kbsync__r1").exists()
    code, stats, err = run_kbsync(env, "stats", "--json")
    assert stats["collection"] == "kbsync", err
    assert stats["namespaces"]["default"]["documents"] == 2 * len(TOPICS)


@pytest.mark.slow  # 30-75 s on 4 workers (docs/development.md, Tests)
def test_a_gate_that_finds_no_relevant_document_refuses(prefect_api, tmp_path):
    home = tmp_path / "home"
    env = hash_env(prefect_api, home)
    share, team = topic_share(tmp_path / "share"), topic_share(tmp_path / "team")
    code, _, err = run_kbsync(env, "ingest", f"share={share}", "--json")
    assert code == 0, err
    code, _, err = run_kbsync(env, "ingest", f"team={team}", "--namespace", "team", "--json")
    assert code == 0, err
    # The queries point into namespace team; the rebuild evaluates default (forgotten flag).
    queries = topic_queries(tmp_path / "q.jsonl", root="team")
    code, out, err = run_kbsync({**env, "KBSYNC_CHUNK_TOKENS": "16"}, "rebuild", "--queries",
                                str(queries), "--json")
    assert code == 2 and out["error"]["kind"] == "UsageError", (code, out, err)
    line = out["error"]["message"]
    assert "none of the 12 queries' 12 relevant documents" in line, line
    assert "namespace 'default'" in line and "--namespace" in line, line
    assert len(err.strip().splitlines()) == 1, err
    assert active_pointer(home) is None
    assert not (home / "qdrant" / "kbsync__r1").exists()


class _Pause:
    """A fault plan for the fake embedding server that holds the first embedding request
    after :meth:`arm` until :meth:`release`: the writer that sent it is then known to be in
    the middle of its run, with its write lock held (``entered`` is the event to wait on)."""

    def __init__(self) -> None:
        self.entered, self.released = threading.Event(), threading.Event()
        self._armed = self._taken = False
        self._lock = threading.Lock()

    def arm(self) -> None:
        with self._lock:
            self._armed = True

    def release(self) -> None:
        self.released.set()

    def __call__(self, request) -> None:
        with self._lock:
            take = (self._armed and not self._taken and request.path.endswith("/embeddings"))
            self._taken = self._taken or take
        if take:
            self.entered.set()
            self.released.wait(300)


def _wait_event(event: threading.Event, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 300
    while not event.wait(0.05):
        assert proc.poll() is None, log.read_text(errors="replace")[-2000:]
        assert time.monotonic() < deadline, f"{proc.args} never reached its pause"


@contextmanager
def _paused_embedder(prefect_api: str, home: Path):
    """An env embedding through the fake server (384 dims, like the hash provider), and its
    :class:`_Pause`."""
    pause = _Pause()
    with FakeOpenAIServer(dimension=384, faults=pause) as server:
        env = hash_env(prefect_api, home, KBSYNC_EMBED_PROVIDER="openai",
                       KBSYNC_EMBED_BASE_URL=server.url, KBSYNC_EMBED_API_KEY="k",
                       KBSYNC_EMBED_MODEL="fake-embedding", KBSYNC_EMBED_DIMENSIONS="384",
                       KBSYNC_EMBED_TIMEOUT_S="600", KBSYNC_FILES_PER_BATCH="4")
        try:
            yield env, pause
        finally:
            pause.release()


@pytest.mark.slow
def test_a_sync_started_during_a_rebuild_waits_for_all_of_it(prefect_api, tmp_path):
    home = tmp_path / "home"
    with _paused_embedder(prefect_api, home) as (env, pause):
        share = topic_share(tmp_path / "share", filler=2)
        queries = topic_queries(tmp_path / "q.jsonl")
        code, _, err = run_kbsync(env, "ingest", f"share={share}", "--json")
        assert code == 0, err
        pause.arm()
        new = {**env, "KBSYNC_CHUNK_TOKENS": "48", "KBSYNC_CHUNK_OVERLAP": "8"}
        rebuild_log = tmp_path / "rebuild.err"
        rebuild = start_kbsync(new, "-v", "rebuild", "--queries", str(queries), "--json",
                         log=rebuild_log)
        _wait_event(pause.entered, rebuild, rebuild_log)  # building the shadow, lock held
        write_tree(share, {"late/zeppelin.md": "# zeppelin\n\nThe zeppelin hangar manual."})
        sync_log = tmp_path / "sync.err"
        sync = start_kbsync({**env, "KBSYNC_LOCK_TIMEOUT_S": "300"}, "ingest", f"share={share}",
                      "--json", log=sync_log)
        _wait_for(sync_log, sync, "waiting for the write lock held by a rebuild")
        pause.release()
        stdout, _ = rebuild.communicate(timeout=600)
        report = json.loads(stdout)
        assert rebuild.returncode == 0 and report["swapped"], rebuild_log.read_text()[-3000:]
        # No sync got in between the build and the replay: the replay brought the late file
        # into the shadow, and the state matched.
        assert report["state"]["matches"] and report["replay"]["default"]["added"] == 1, report
        sync_out, _ = sync.communicate(timeout=600)
        result = json.loads(sync_out)
        sync_err = sync_log.read_text()
        # The sync waited for the whole rebuild, then found the collection swapped under it:
        # refused before writing anything, with the one line that says to run it again.
        if sync.returncode:
            assert result["error"]["kind"] == "StoreUnavailable", sync_err
            assert "now serves from kbsync__r1" in result["error"]["message"], sync_err
        assert "LockHeld" not in sync_err and "read-only" not in sync_err, sync_err
        code, again, err = run_kbsync(env, "ingest", f"share={share}", "--json")
        assert code == 0 and again["collection"] == "kbsync__r1", err
        assert again["unchanged"] == len(TOPICS) + 1, again


@pytest.mark.slow
def test_a_rebuild_during_an_ingest_is_lock_held(prefect_api, tmp_path):
    home = tmp_path / "home"
    with _paused_embedder(prefect_api, home) as (env, pause):
        share = topic_share(tmp_path / "share")
        code, _, err = run_kbsync(env, "ingest", f"share={share}", "--json")
        assert code == 0, err
        pause.arm()
        big = topic_share(tmp_path / "big", filler=2)
        ingest_log = tmp_path / "ingest.err"
        ingest = start_kbsync(env, "ingest", f"big={big}", "--json", log=ingest_log)
        _wait_event(pause.entered, ingest, ingest_log)  # mid-ingest, lock held
        for extra in ({}, {"KBSYNC_LOCK_TIMEOUT_S": "1"}):  # refused at once, and after a wait
            code, out, err = run_kbsync({**env, **extra, "KBSYNC_CHUNK_TOKENS": "64"}, "rebuild",
                                        "--queries", str(topic_queries(tmp_path / "q.jsonl")),
                                        "--json")
            assert code == 1 and out["error"]["kind"] == "LockHeld", (extra, code, out, err)
            assert "an ingest of namespace 'default'" in out["error"]["message"], out
            assert "AttributeError" not in err and "InternalError" not in err, err
        pause.release()
        ingest.communicate(timeout=600)
        assert ingest.returncode == 0, ingest_log.read_text()[-2000:]
    assert not (home / "qdrant" / "kbsync__r1").exists()
