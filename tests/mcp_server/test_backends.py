"""The backend choice of ``kbsync mcp`` and the tools over a server client, in process.

The remote backend is a thin adapter over ``kbsync.serve.client`` (issue 40's other door):
here a stand-in client with that interface (``connect_from_env(env=...)``, ``search``,
``ask``, ``stats`` taking the request JSON and returning the ``--json`` objects, errors
raised as ``kbsync.errors`` kinds) shows what the tools send and how they answer. The real
client is driven by ``test_mcp_server_door.py`` once it exists.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from kbsync.errors import StoreUnavailable, UsageError
from kbsync.mcp_server.backend import LocalBackend, RemoteBackend, choose_backend
from kbsync.mcp_server.tools import Tools

HIT = {"rank": 1, "score": 0.9, "doc_id": "kb/keys.md", "path": "/srv/kb/keys.md",
       "chunk_index": 0, "heading_path": "API keys > Rotation", "page_start": 3, "page_end": 4,
       "text": "Keys rotate every 90 days."}


class StandIn:
    """A server client that records the request JSON it is sent."""

    def __init__(self, namespaces: dict[str, dict[str, int]]) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.namespaces = namespaces
        self.fail: Exception | None = None
        self.closed = False

    def _reply(self, op: str, args: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
        self.sent.append((op, args))
        if self.fail is not None:
            raise self.fail
        return data

    def search(self, args: dict[str, Any]) -> dict[str, Any]:
        hits = [HIT] if args["namespace"] in self.namespaces else []
        return self._reply("search", args, {
            "query": args["query"], "namespace": args["namespace"], "mode": "hybrid",
            "raw_count": len(hits), "kept_count": len(hits), "results": hits, "latency_ms": 1.0,
            "expansions": [], "notes": [], "filters": {}})

    def ask(self, args: dict[str, Any]) -> dict[str, Any]:
        return self._reply("ask", args, {
            "query": args["query"], "namespace": args["namespace"], "mode": "dense",
            "answer": "Every 90 days [1].", "answered": True,
            "citations": [{"n": 1, "doc_id": "kb/keys.md", "page_start": 3, "page_end": 4,
                           "heading_path": "API keys > Rotation"}],
            "raw_count": 1, "kept_count": 1, "results": [HIT], "latency_ms": 1.0})

    def stats(self, args: dict[str, Any]) -> dict[str, Any]:
        return self._reply("stats", args, {"collection": "kbsync", "embedding": {},
                                           "namespaces": self.namespaces})

    def health(self) -> dict[str, Any]:
        return {"ok": True}

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def client(monkeypatch) -> StandIn:
    """A stand-in ``kbsync.serve.client`` module whose ``connect_from_env`` gives one client."""
    made = StandIn({"default": {"documents": 2, "chunks": 5, "failed_embeddings": 0}})
    module = types.ModuleType("kbsync.serve.client")
    module.connect_from_env = lambda env=None: made if env.get("KBSYNC_SERVER") else None
    monkeypatch.setitem(sys.modules, "kbsync.serve.client", module)
    return made


def test_without_kbsync_server_the_reader_reads_their_own_store(settings) -> None:
    assert isinstance(choose_backend(settings, env={}), LocalBackend)
    assert isinstance(choose_backend(settings, env={"KBSYNC_SERVER": "  "}), LocalBackend)


def test_kbsync_server_goes_through_the_servers_client(settings, client) -> None:
    backend = choose_backend(settings, env={"KBSYNC_SERVER": "unix:/run/kbsync.sock"})
    assert isinstance(backend, RemoteBackend) and backend.address == "unix:/run/kbsync.sock"
    tools = Tools(backend)
    found = tools.search("rotate keys", k=3, types=["markdown"])
    assert not found.is_error
    assert found.structured_content["results"] == [HIT]
    assert '[1] kb/keys.md, p. 3-4, "API keys > Rotation"' in found.content[0].text
    # The request JSON carries no identity and no unset option: the server names the caller.
    assert client.sent == [("search", {"query": "rotate keys", "namespace": "default", "k": 3,
                                       "mode": "hybrid", "types": ["markdown"]})]
    answer = tools.ask("How often do keys rotate?", k=2)
    assert not answer.is_error and "Sources:\n[1] kb/keys.md, p. 3-4" in answer.content[0].text
    assert client.sent[-1] == ("ask", {"query": "How often do keys rotate?",
                                       "namespace": "default", "k": 2})
    listed = tools.namespaces()
    assert listed.structured_content["namespaces"] == client.namespaces
    assert "- default: 2 documents, 5 chunks" in listed.content[0].text
    backend.close()
    assert client.closed


def test_the_servers_errors_are_one_line_each(settings, client) -> None:
    tools = Tools(choose_backend(settings, env={"KBSYNC_SERVER": "http://kb:8080"}))
    unknown = tools.search("keys", namespace="secret")
    assert unknown.is_error and unknown.content[0].text == (
        "UsageError: unknown namespace 'secret': the namespaces you can read are 'default'")
    client.fail = StoreUnavailable("the server at http://kb:8080 does not answer\n(refused)")
    down = tools.search("keys")
    assert down.is_error and down.content[0].text == (
        "StoreUnavailable: the server at http://kb:8080 does not answer (refused)")
    client.fail = RuntimeError("boom\nwith a second line")
    crash = tools.namespaces()
    assert crash.is_error and crash.content[0].text == "InternalError: RuntimeError: boom"
    client.fail = None
    assert not tools.search("keys").is_error  # and the next call is served


def test_kbsync_server_without_a_client_is_one_usage_line(settings, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "kbsync.serve.client", None)  # import fails
    with pytest.raises(UsageError, match=r"^KBSYNC_SERVER=unix:/x is set, but this kbsync has "
                                         r"no server client"):
        choose_backend(settings, env={"KBSYNC_SERVER": "unix:/x"})


def test_local_backend_refuses_unknown_keys_and_bad_values(settings) -> None:
    backend = LocalBackend(settings)
    with pytest.raises(UsageError, match="unknown argument as_user"):
        backend.search({"query": "keys", "as_user": "root"})  # no widening through the door
    with pytest.raises(UsageError, match="k must be between 1 and 100, got 100000"):
        backend.search({"query": "keys", "k": 100000})
    with pytest.raises(UsageError, match="unknown argument mode"):
        backend.ask({"query": "keys", "mode": "hybrid"})


def test_each_call_follows_the_active_collection_so_a_swap_needs_no_restart(
        settings, tmp_path) -> None:
    """The backend outlives a rebuild: a call after the swap reads the new collection, and
    between calls it holds no store (the swap below opens it)."""
    from kbsync.ingest.discover import parse_root
    from kbsync.ingest.runner import run_plain
    from kbsync.maintenance import rebuild as rb
    from kbsync.models import SyncMode
    from kbsync.runtime import Runtime
    from kbsync.store import open_store
    from kbtest import shadow_runtime, write_tree

    old, new = tmp_path / "old", tmp_path / "new"
    write_tree(old, {"glacier.md": "# Glacier\n\nThe glacier guide."})
    write_tree(new, {"volcano.md": "# Volcano\n\nThe volcano guide."})
    runtime = Runtime.open(settings)
    try:
        run_plain([parse_root(f"old={old}")], runtime=runtime)
        run_plain([parse_root(f"new={new}")], runtime=shadow_runtime(runtime),
                  mode=SyncMode.FULL)
    finally:
        runtime.close()
    backend = LocalBackend(settings)
    query = {"query": "volcano guide", "k": 5, "mode": "dense"}
    assert {h["doc_id"] for h in backend.search(query)["results"]} == {"old/glacier.md"}

    plan = rb.RebuildPlan(logical="kbsync", live="kbsync", shadow="kbsync__r1", previous=None,
                          roots={"default": [f"new={new}"]}, live_build={},
                          target_build={"chunk_tokens": 64})
    store = open_store(settings)
    try:
        rb.swap(plan, settings, store)
    finally:
        store.close()
    assert {h["doc_id"] for h in backend.search(query)["results"]} == {"new/volcano.md"}
    assert backend.stats({})["collection"] == "kbsync__r1"
