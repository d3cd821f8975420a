"""Errors a person can act on, and one JSON object on every exit path (issue 11.3, 11.4),
through the real ``kbsync`` command.

Every failure is one line on stderr (no traceback) and, with ``--json``, exactly one
JSON object on stdout with ``error: {kind, message}`` (ingest: plus its counts).
Commands that never start a flow point PREFECT_API_URL at a closed port, so a
regression that starts one fails fast instead of starting a temporary server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from fake_openai import Fault, FakeOpenAIServer
from kbtest import hash_env, write_tree

KBSYNC = str(Path(sys.executable).with_name("kbsync"))
NO_PREFECT = "http://127.0.0.1:9/api"  # nothing listens there
SUMMARY_KEYS = {"run_id", "namespace", "collection", "mode", "dry_run", "files_seen", "added",
                "updated", "unchanged", "deleted", "failed", "ignored", "chunks_raw",
                "chunks_kept", "embeddings_computed", "embeddings_cached", "embeddings_failed",
                "duration_s", "failures", "roots", "files_hashed", "partial",
                "embeddings_truncated", "warnings"}


@dataclass
class Run:
    code: int
    out: str
    err: str
    seconds: float

    def obj(self) -> dict:
        """Exactly one JSON object on stdout."""
        lines = [line for line in self.out.splitlines() if line.strip()]
        assert len(lines) == 1, self.out
        data = json.loads(lines[0])
        assert isinstance(data, dict)
        return data

    def line(self) -> str:
        """Exactly one line on stderr, and no traceback."""
        assert "Traceback" not in self.err, self.err
        lines = [line for line in self.err.splitlines() if line.strip()]
        assert len(lines) == 1, self.err
        return lines[0]

    def last_line(self) -> str:
        """The last stderr line; every line is kbsync's own (no traceback, no Prefect log)."""
        assert "Traceback" not in self.err, self.err
        lines = [line for line in self.err.splitlines() if line.strip()]
        assert lines and all(line.startswith(("kbsync: ", "WARNING kbsync.")) for line in lines), \
            self.err
        return lines[-1]


OUTER = ("KBSYNC_", "PREFECT_")
"""No setting and no Prefect variable of the outer shell reaches a run here."""


def kbsync(env, *args: str, stdin=subprocess.DEVNULL) -> Run:
    started = time.perf_counter()
    proc = subprocess.run([KBSYNC, *args], env=env, capture_output=True, text=True,
                          timeout=300, stdin=stdin)
    return Run(proc.returncode, proc.stdout, proc.stderr, time.perf_counter() - started)


def _share(root: Path, tag: str, count: int = 2) -> Path:
    write_tree(root, {f"{tag}{i}.md": f"# {tag} note {i}\n\nThe {tag} share, note {i}: "
                                      f"quartz{tag} facts." for i in range(count)})
    return root


# -- usage and configuration errors: exit 2, one line, one object ------------------------------
@pytest.mark.parametrize("argv, names", [
    (["search", "", "--json"], "QUERY"),
    (["search", "x", "--namespace", "", "--json"], "--namespace"),
    (["search", "x", "--min-score", "nan", "--json"], "--min-score"),
    (["search", "x", "-k", "0", "--json"], "-k"),
    (["ask", "   ", "--json"], "QUESTION"),
    (["ask", "x", "--min-score", "inf", "--json"], "--min-score"),
    (["stats", "--namespace", "", "--json"], "--namespace"),
    (["remove", "--json"], "--root"),
    (["remove", "--namespace", "a", "--namespace-of-root", "b", "--yes", "--json"],
     "--namespace-of-root"),
    (["bogus", "--json"], "bogus"),
])
def test_usage_errors_are_one_line_exit_2_and_one_object(tmp_path, argv, names):
    run = kbsync(hash_env(NO_PREFECT, tmp_path / "home", drop=OUTER), *argv)
    assert run.code == 2, run.err
    line = run.line()
    assert line.startswith("kbsync: error: ") and names in line
    assert run.obj() == {"error": {"kind": "UsageError", "message": line[len("kbsync: error: "):]}}
    assert not (tmp_path / "home").exists()


@pytest.mark.parametrize("argv", [["--namespace", ""], ["--mode", "sideways"], []])
def test_ingest_usage_errors_report_zero_counts(tmp_path, argv):
    share = _share(tmp_path / "share", "a")
    run = kbsync(hash_env(NO_PREFECT, tmp_path / "home", drop=OUTER), "ingest", *([str(share)] if argv else []), *argv,
                 "--json")
    assert run.code == 2, run.err
    line = run.line()
    data = run.obj()
    assert set(data) >= SUMMARY_KEYS | {"error"} and data["error"]["kind"] == "UsageError"
    assert data["files_seen"] == data["added"] == data["failed"] == 0
    assert (argv[0] if argv else "ROOT") in line


@pytest.mark.parametrize("variable, value, reason", [
    ("KBSYNC_EMBED_BATCH_SIZE", "abc", "integer"),
    ("KBSYNC_EMBED_PROVIDER", "nope", "'local'"),
    ("KBSYNC_LOCK_TIMEOUT_S", "-1", "greater than or equal to 0"),
])
def test_configuration_errors_name_the_variable(tmp_path, variable, value, reason):
    env = hash_env(NO_PREFECT, tmp_path / "home", drop=OUTER, **{variable: value})
    for argv in (["stats", "--json"], ["ingest", str(_share(tmp_path / "s", "a")), "--json"]):
        run = kbsync(env, *argv)
        assert run.code == 2, run.err
        line = run.line()
        assert line.startswith(f"kbsync: error: {variable}=") and reason in line, line
        assert "ValidationError" not in line
        data = run.obj()
        assert data["error"]["kind"] == "UsageError" and variable in data["error"]["message"]
        assert argv[0] != "ingest" or data["files_seen"] == 0


def test_version(tmp_path):
    from importlib.metadata import version

    run = kbsync(hash_env(NO_PREFECT, tmp_path / "home", drop=OUTER), "--version")
    assert run.code == 0 and run.out.strip() == f"kbsync {version('kbsync')}"


# -- reads of a store that holds nothing ----------------------------------------------------------
def test_reads_of_a_missing_store_answer_at_once_and_create_nothing(tmp_path):
    home = tmp_path / "home"
    # The default local model: answering must not load it (that alone takes ~12 s).
    env = hash_env(NO_PREFECT, home, drop=OUTER, KBSYNC_EMBED_PROVIDER="local",
                   KBSYNC_LLM_MODEL="fake-chat", KBSYNC_LLM_BASE_URL="http://127.0.0.1:9/v1", KBSYNC_LLM_API_KEY="k")
    search = kbsync(env, "-v", "search", "rotate keys", "--json")
    assert search.code == 0, search.err
    # The event itself, not a time bound: debug logging names every model load.
    assert "local embedding model" not in search.err and "ONNX" not in search.err, search.err
    hits = search.obj()
    assert hits["results"] == [] and "nothing is indexed yet" in hits["notes"][0]
    ask = kbsync(env, "ask", "how do keys rotate?", "--json")
    assert ask.code == 0, ask.err
    answer = ask.obj()
    assert answer["answered"] is False and "nothing is indexed yet" in answer["answer"]
    stats = kbsync(env, "stats", "--json")
    assert stats.code == 0, stats.err
    assert stats.obj()["namespaces"] == {}
    readable = kbsync(env, "search", "rotate keys")
    assert readable.code == 0 and "nothing is indexed yet" in readable.out
    assert not home.exists()  # reading made no folder


# -- run failures: exit 1, one line, one object with the counts reached ---------------------------
def test_closed_qdrant_port_is_one_line_naming_the_url(tmp_path):
    env = hash_env(NO_PREFECT, tmp_path / "home", drop=OUTER, KBSYNC_QDRANT_URL="http://127.0.0.1:1")
    for argv in (["stats", "--json"], ["search", "keys", "--json"]):
        run = kbsync(env, *argv)
        assert run.code == 1, run.err
        line = run.line()
        assert line.startswith("kbsync: StoreUnavailable: ") and "http://127.0.0.1:1" in line
        assert run.obj()["error"] == {"kind": "StoreUnavailable",
                                      "message": line[len("kbsync: StoreUnavailable: "):]}


@pytest.mark.slow  # 30-75 s on 4 workers (docs/development.md, Tests)
def test_a_held_lock_is_refused_before_the_run_naming_holder_and_namespace(prefect_api,
                                                                        tmp_path, settings):
    from kbsync.catalog.lock import ingest_lock

    env = hash_env(prefect_api, settings.home, drop=OUTER)
    share = _share(tmp_path / "share", "a")
    with ingest_lock(settings, "other-team"):
        run = kbsync(env, "ingest", str(share), "--json")
    assert run.code == 1, run.err
    line = run.line()
    assert line.startswith("kbsync: LockHeld: an ingest of namespace 'other-team' "
                           f"(pid {os.getpid()})"), line
    assert "this namespace" not in line and "KBSYNC_LOCK_TIMEOUT_S" in line
    data = run.obj()
    assert set(data) >= SUMMARY_KEYS and data["error"]["kind"] == "LockHeld"
    assert data["files_seen"] == 0 and data["namespace"] == "default"
    assert run.seconds < 15  # refused before any Prefect run started


@pytest.mark.slow
def test_run_failures_print_one_line_and_one_object_with_the_counts(prefect_api, tmp_path,
                                                                    settings):
    from kbsync.catalog.lock import ingest_lock

    share = _share(tmp_path / "share", "a")
    # 1. The lock taken inside the flow (waiting is allowed, then refused).
    env = hash_env(prefect_api, settings.home, drop=OUTER, KBSYNC_LOCK_TIMEOUT_S="0.5")
    with ingest_lock(settings, "other-team"):
        run = kbsync(env, "ingest", str(share), "--json")
    assert run.code == 1, run.err
    assert run.last_line().startswith("kbsync: LockHeld: an ingest of namespace 'other-team'")
    data = run.obj()
    assert data["error"]["kind"] == "LockHeld" and data["run_id"] and data["files_seen"] == 0

    # 2. A closed Qdrant port: one line naming the URL (it used to be 12 tracebacks).
    env = hash_env(prefect_api, tmp_path / "home2", drop=OUTER, KBSYNC_QDRANT_URL="http://127.0.0.1:1")
    run = kbsync(env, "ingest", str(share), "--json")
    assert run.code == 1, run.err
    line = run.line()
    assert line.startswith("kbsync: StoreUnavailable: ") and "http://127.0.0.1:1" in line
    assert run.obj()["error"]["kind"] == "StoreUnavailable"

    # 3. A total embedding outage: the counts reached come with the error.
    with FakeOpenAIServer(dimension=8, faults=lambda request: Fault.error(503)) as server:
        env = hash_env(prefect_api, tmp_path / "home3", drop=OUTER, KBSYNC_EMBED_PROVIDER="openai",
                       KBSYNC_EMBED_BASE_URL=server.url, KBSYNC_EMBED_API_KEY="k",
                       KBSYNC_EMBED_MODEL="fake-embedding", KBSYNC_EMBED_DIMENSIONS="8",
                       KBSYNC_EMBED_MAX_ATTEMPTS="1")
        run = kbsync(env, "ingest", str(share), "--json")
    assert run.code == 1, run.err
    assert run.last_line().startswith("kbsync: EmbeddingOutage: ")
    data = run.obj()
    assert data["error"]["kind"] == "EmbeddingOutage"
    assert data["files_seen"] == data["failed"] == 2 and data["chunks_kept"] >= 2
    assert {f["error"] for f in data["failures"]} == {"EmbeddingFailed"}


# -- kbsync remove ----------------------------------------------------------------------------------
def _stats(env) -> dict:
    run = kbsync(env, "stats", "--json")
    assert run.code == 0, run.err
    return run.obj()["namespaces"]


@pytest.mark.slow
def test_remove_a_root_then_a_namespace(prefect_api, tmp_path, settings):
    from kbsync.catalog.lock import ingest_lock

    env = hash_env(prefect_api, settings.home, drop=OUTER)
    a, b, c = (_share(tmp_path / n, n, count) for n, count in (("a", 3), ("b", 2), ("c", 1)))
    assert kbsync(env, "ingest", str(a), str(b), "--json").code == 0
    assert kbsync(env, "ingest", str(c), "--namespace", "team", "--json").code == 0
    before = _stats(env)
    assert before["default"]["documents"] == 5 and before["team"]["documents"] == 1

    refused = kbsync(env, "remove", "--root", "a", "--json")  # stdin is not a terminal
    assert refused.code == 2
    assert "--yes" in refused.line() and refused.obj()["error"]["kind"] == "UsageError"
    assert _stats(env) == before

    with ingest_lock(settings, "other-team"):  # remove takes the ingest's write lock
        locked = kbsync(env, "remove", "--root", "a", "--yes", "--json")
    assert locked.code == 1 and locked.obj()["error"]["kind"] == "LockHeld"
    assert "an ingest of namespace 'other-team'" in locked.line()
    assert _stats(env) == before

    run = kbsync(env, "remove", "--root", "a", "--yes", "--json")
    assert run.code == 0, run.err
    assert run.obj() == {"collection": "kbsync", "namespace": "default", "root": "a",
                         "documents": 3, "chunks": before["default"]["chunks"] - 2,
                         "root_bindings": 1, "confirmed": True, "previous": None}
    after = _stats(env)
    assert after["default"] == {"documents": 2, "chunks": 2, "failed_embeddings": 0}
    hits = kbsync(env, "search", "quartza facts", "--json").obj()["results"]
    assert hits and all(h["doc_id"].startswith("b/") for h in hits)

    readable = kbsync(env, "remove", "--namespace", "team", "--yes")
    assert readable.code == 0 and "removed namespace 'team': 1 documents" in readable.out
    assert set(_stats(env)) == {"default"}
    again = kbsync(env, "remove", "--namespace", "team", "--yes", "--json")
    assert again.code == 0 and again.obj()["documents"] == again.obj()["chunks"] == 0

    # The root's binding went with it: the NAME may now stand for another share.
    moved = _share(tmp_path / "elsewhere" / "a", "z", 1)
    run = kbsync(env, "ingest", str(moved), "--json")
    assert run.code == 0, run.err
    assert run.obj()["added"] == 1

    # A wrong embedder is refused with one line and one object too.
    run = kbsync(env | {"KBSYNC_EMBED_DIMENSIONS": "16"}, "ingest", str(b), "--json")
    assert run.code in (1, 2), run.err
    assert run.obj()["error"]["kind"] in ("EmbedderMismatch", "DimensionMismatch")
    assert "Traceback" not in run.err


def test_remove_asks_on_a_terminal(tmp_path, settings):
    import pty

    from kbsync.ingest.discover import parse_root
    from kbsync.ingest.runner import run_plain
    from kbsync.runtime import Runtime

    runtime = Runtime.open(settings)
    try:
        run_plain([parse_root(f"docs={_share(tmp_path / 'docs', 'd', 2)}")], runtime=runtime)
    finally:
        runtime.close()
    env = hash_env(NO_PREFECT, settings.home, drop=OUTER)

    def answer(text: str) -> Run:
        leader, follower = pty.openpty()
        try:
            os.write(leader, text.encode())
            return kbsync(env, "remove", "--root", "docs", stdin=follower)
        finally:
            os.close(leader)
            os.close(follower)

    declined = answer("n\n")
    assert declined.code == 0, declined.err
    assert "Remove root 'docs' of namespace 'default'" in declined.err
    assert "2 documents" in declined.err and "nothing was removed" in declined.out
    assert _stats(env)["default"]["documents"] == 2
    confirmed = answer("y\n")
    assert confirmed.code == 0, confirmed.err
    assert "removed root 'docs' of namespace 'default': 2 documents" in confirmed.out
    assert _stats(env) == {}
