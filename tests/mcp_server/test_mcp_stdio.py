"""``kbsync mcp`` driven by the MCP SDK's own client over stdio (issue 40).

The server is the real command (``python -m kbsync mcp``, this tree's code) on a test home
with hash embeddings; the client is ``mcp.client.stdio`` + ``ClientSession``. Covered: the
tools and their schemas, each tool's reply equal to the CLI's ``--json`` object, bad input
answered with one-line tool errors while the server keeps serving, and a search while an
ingest (another process holding the store, serving reads on its relay) writes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from fake_openai import FakeOpenAIServer
from kbtest import REPO, hash_env, write_tree

WRITER = REPO / "tests" / "store" / "relay_writer.py"
DOCS = {
    "keys.md": "# API keys\n\n## Rotation\n\nTessera API keys must be rotated every 90 days. "
               "A rotated key keeps working for a 24-hour grace period.\n",
    "deploys.md": "# Deploys\n\n## Fridays\n\nThere are no production deploys on Fridays after "
                  "15:00 UTC.\n",
    "guides/backup.md": "# Backups\n\nNightly backups are kept for 30 days and restored with "
                        "the restore tool.\n",
}
OPS = {"runbook.md": "# Runbook\n\nPage the on-call engineer when the queue backs up.\n"}
TIMEOUT_S = 60


def _env(home: Path, **extra: str) -> dict[str, str]:
    # PYTHONPATH: the helper scripts import this tree's kbsync, not the installed one.
    return hash_env(None, home, PYTHONPATH=str(REPO), **extra)


def _ingest(env: dict[str, str], share: Path, namespace: str) -> None:
    code = ("import sys\nfrom kbsync.ingest.discover import parse_root\n"
            "from kbsync.ingest.runner import run_plain\nfrom kbsync.runtime import Runtime\n"
            "from kbsync.settings import Settings\nrt = Runtime.open(Settings())\n"
            "try:\n    s = run_plain([parse_root(sys.argv[1])], runtime=rt, namespace=sys.argv[2])\n"
            "    assert s.failed == 0, s.failures\nfinally:\n    rt.close()\n")
    subprocess.run([sys.executable, "-c", code, str(share), namespace], env=env, cwd=REPO,
                   check=True, capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def indexed(tmp_path_factory) -> tuple[Path, Path]:
    """A home holding the share ``kb`` in ``default`` and ``ops`` in ``ops``; (home, share)."""
    tmp = tmp_path_factory.mktemp("mcp")
    home, share, ops = tmp / "home", tmp / "kb", tmp / "ops"
    write_tree(share, DOCS)
    write_tree(ops, OPS)
    env = _env(home)
    _ingest(env, share, "default")
    _ingest(env, ops, "ops")
    return home, share


def _serve(env: dict[str, str], body: Callable[[ClientSession], Awaitable[Any]],
           log: Path) -> Any:
    """Start ``kbsync mcp`` with ``env`` (its stderr to ``log``), run ``body(session)`` on an
    initialized session; the server must leave nothing but the protocol on stdout."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "kbsync", "mcp"],
                                   env=env, cwd=str(REPO))

    async def main() -> Any:
        with anyio.fail_after(TIMEOUT_S), log.open("w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    return await body(session)
    return anyio.run(main)


def _cli(env: dict[str, str], monkeypatch, capsys, *args: str) -> dict:
    """``kbsync ARGS --json`` run in this process with ``env``'s settings: its JSON object."""
    from kbsync.app.cli import main

    with monkeypatch.context() as patch:
        for key in [k for k in os.environ if k.upper().startswith("KBSYNC_")]:
            patch.delenv(key)
        for key, value in env.items():
            if key.startswith("KBSYNC_"):
                patch.setenv(key, value)
        capsys.readouterr()
        assert main([*args, "--json"]) == 0, capsys.readouterr().err
        return json.loads(capsys.readouterr().out)


def _without_latency(data: dict) -> dict:
    return {k: v for k, v in data.items() if k not in ("latency_ms", "answer_latency_ms")}


def _error_line(result) -> str:
    """The one text line of a tool error."""
    assert result.is_error, result
    (block,) = result.content
    assert "\n" not in block.text.strip() and "Traceback" not in block.text, block.text
    return block.text


def test_tools_are_listed_with_schemas_and_each_answers_as_the_cli_does(
        indexed, tmp_path, monkeypatch, capsys) -> None:
    home, _ = indexed
    with FakeOpenAIServer(chat_reply="Keys rotate every 90 days [1].") as chat:
        env = _env(home, KBSYNC_LLM_BASE_URL=chat.url, KBSYNC_LLM_MODEL="fake-chat")

        async def body(session: ClientSession):
            listed = (await session.list_tools()).tools
            calls = {
                "namespaces": await session.call_tool("namespaces", {}),
                "search": await session.call_tool("search", {"query": "rotate API keys",
                                                             "k": 2, "types": ["markdown"]}),
                "ask": await session.call_tool("ask", {"question": "How often are API keys "
                                                                   "rotated?", "k": 2}),
            }
            return listed, calls
        listed, calls = _serve(env, body, tmp_path / "mcp.log")
        search_cli = _cli(env, monkeypatch, capsys, "search", "rotate API keys", "-k", "2", "--type", "markdown")
        ask_cli = _cli(env, monkeypatch, capsys, "ask", "How often are API keys rotated?", "-k", "2")
        stats_cli = _cli(env, monkeypatch, capsys, "stats")

    tools = {tool.name: tool for tool in listed}
    assert set(tools) == {"search", "ask", "namespaces"}
    for tool in tools.values():
        assert tool.description and len(tool.description) > 80, tool.name
        assert tool.output_schema and tool.output_schema["type"] == "object", tool.name
        assert tool.annotations is not None and tool.annotations.read_only_hint, tool.name
        for name, prop in tool.input_schema.get("properties", {}).items():
            assert prop.get("description"), (tool.name, name)
    search_schema = tools["search"].input_schema
    assert search_schema["required"] == ["query"]
    assert set(search_schema["properties"]) == {"query", "namespace", "k", "mode", "root",
                                                "path_prefix", "types", "modified_since"}
    assert (search_schema["properties"]["k"]["minimum"],
            search_schema["properties"]["k"]["maximum"]) == (1, 100)
    assert tools["ask"].input_schema["required"] == ["question"]

    for name in calls:
        assert not calls[name].is_error, calls[name].content
    search = calls["search"].structured_content
    assert _without_latency(search) == _without_latency(search_cli)
    assert len(search["results"]) == 2 and search["results"][0]["doc_id"] == "kb/keys.md"
    hit = search["results"][0]
    assert {"doc_id", "path", "heading_path", "page_start", "page_end", "score",
            "text"} <= set(hit)
    text = calls["search"].content[0].text
    assert '[1] kb/keys.md, "API keys > Rotation"' in text and "rotated every 90 days" in text

    answer = calls["ask"].structured_content
    assert _without_latency(answer) == _without_latency(ask_cli)
    assert answer["answered"] and answer["citations"][0]["doc_id"] == "kb/keys.md"
    assert calls["ask"].content[0].text.startswith("Keys rotate every 90 days [1].")
    assert "Sources:\n[1] kb/keys.md" in calls["ask"].content[0].text

    assert calls["namespaces"].structured_content == stats_cli
    assert set(stats_cli["namespaces"]) == {"default", "ops"}
    assert "- default: 3 documents" in calls["namespaces"].content[0].text


BAD = [
    ({"query": "keys", "k": 100000}, "UsageError: invalid arguments: k: "),
    ({"query": "keys", "k": "many"}, "UsageError: invalid arguments: k: "),
    ({"query": "   "}, "UsageError: query is empty"),
    ({"query": "keys", "namespace": "nope"},
     "UsageError: unknown namespace 'nope': the namespaces you can read are 'default', 'ops'"),
    ({"query": "keys", "namespace": ""}, "UsageError: invalid arguments: namespace: "),
    ({"query": "keys", "namespace": "n" * 201}, "UsageError: invalid arguments: namespace: "),
    ({"query": "keys", "modified_since": "yesterday"}, "UsageError: modified-since must be"),
    ({"query": "keys", "types": ["exe"]}, "UsageError: unknown file type 'exe'"),
    ({"query": "keys", "path_prefix": "../../etc"}, "UsageError: "),
    ({"query": "keys", "mode": "sparse"}, "UsageError: invalid arguments: mode: "),
    ({}, "UsageError: invalid arguments: query: "),
    ({"query": "keys", "as_user": "root"}, "UsageError: unknown argument as_user; search takes "
                                           "query, namespace, k, mode, root, path_prefix, types, "
                                           "modified_since"),
    ({"query": "keys", "namespace_name": "ops"}, "UsageError: unknown argument namespace_name"),
]


def test_bad_input_is_one_tool_error_line_and_the_server_keeps_serving(indexed, tmp_path) -> None:
    home, _ = indexed

    async def body(session: ClientSession):
        # Each bad call is answered with its own line, so the one before left the server
        # serving; the good call after them all gets its results.
        replies = [await session.call_tool("search", args) for args, _ in BAD]
        good = await session.call_tool("search", {"query": "deploys on Fridays", "k": 1})
        # A filter value is a value, never a query: it narrows or matches nothing.
        injected = [await session.call_tool("search", {"query": "keys", "root": root})
                    for root in ("kb\" OR 1=1", "kb OR ops", "*")]
        ask = await session.call_tool("ask", {"question": "keys?"})  # no chat model set
        unknown = await session.call_tool("delete_everything", {})
        return replies, good, injected, ask, unknown

    replies, good, injected, ask, unknown = _serve(_env(home), body, tmp_path / "mcp.log")
    for (args, start), bad in zip(BAD, replies, strict=True):
        assert _error_line(bad).startswith(start), (args, bad.content[0].text)
    assert not good.is_error, good.content
    assert good.structured_content["results"][0]["doc_id"] == "kb/deploys.md"
    for reply in injected:
        assert reply.is_error or reply.structured_content["results"] == [], reply.content
    assert _error_line(ask).startswith("LLMNotConfigured: no chat model configured")
    assert "delete_everything" in _error_line(unknown)


def test_search_during_an_ingest_goes_through_its_relay(indexed, tmp_path) -> None:
    """An ingest-like writer (relay_writer.py: the store held, reads served on its relay,
    forced re-ingests all the time) starts between two calls: the server held no store
    between them, and the second call reads through the writer."""
    home, share = indexed
    env = _env(home)
    stop = tmp_path / "stop"
    writer_log = (tmp_path / "writer.log").open("wb")

    async def body(session: ClientSession):
        query = {"query": "nightly backups", "k": 1}
        before = await session.call_tool("search", query)
        writer = await anyio.open_process([sys.executable, str(WRITER), str(share), str(stop)],
                                          env=env, cwd=REPO, stderr=writer_log)
        try:
            assert writer.stdout is not None
            line = b""
            while not line.endswith(b"\n"):  # the writer says "ready" once it holds the store
                line += await writer.stdout.receive(1)
            assert line.strip() == b"ready"
            during = [await session.call_tool("search", query) for _ in range(3)]
            stats = await session.call_tool("namespaces", {})
            assert writer.returncode is None  # still holding the store
            stop.touch()
            rest = b""
            async for chunk in writer.stdout:
                rest += chunk
            assert await writer.wait() == 0
        finally:
            if writer.returncode is None:
                writer.kill()
        after = await session.call_tool("search", query)
        return before, during, stats, rest, after

    started = time.monotonic()
    with writer_log:
        before, during, stats, rest, after = _serve(env, body, tmp_path / "mcp.log")
    assert rest.decode().startswith("runs "), rest
    for reply in (before, *during, after):
        assert not reply.is_error, reply.content
        assert reply.structured_content["results"][0]["doc_id"] == "kb/guides/backup.md"
    assert not stats.is_error and stats.structured_content["namespaces"]["default"][
        "documents"] == len(DOCS)
    assert time.monotonic() - started < TIMEOUT_S


def test_a_store_held_by_a_process_that_serves_no_reads_is_one_line(indexed, tmp_path) -> None:
    """Another process holds the store and runs no relay (here: this test's own handle):
    a call answers one StoreUnavailable line after the reader's short wait, and the next call,
    once the store is free, is served."""
    from kbsync.settings import Settings
    from kbsync.store.edge.store import EdgeStore

    home, _ = indexed
    query = {"query": "deploys on Fridays", "k": 1}

    async def body(session: ClientSession):
        held = EdgeStore(Settings(home=home).store_path)
        try:
            locked = await session.call_tool("search", query)
        finally:
            held.close()
        return locked, await session.call_tool("search", query)

    locked, free = _serve(_env(home), body, tmp_path / "mcp.log")
    assert _error_line(locked).startswith("StoreUnavailable: "), locked.content
    assert not free.is_error and free.structured_content["results"][0]["doc_id"] == \
        "kb/deploys.md"


@pytest.mark.slow  # a Prefect test server and a real ingest of 1,500 files: ~1 minute
def test_search_during_the_real_ingest_flow(prefect_api, tmp_path) -> None:
    """The real ``kbsync ingest`` (the Prefect flow) of a new share into a home that already
    holds ``kb``: once it says it serves reads (its relay, ``-v``), ``search`` and
    ``namespaces`` are answered from the store it holds, while it still runs."""
    home, share, big = tmp_path / "home", tmp_path / "kb", tmp_path / "big"
    write_tree(share, DOCS)
    write_tree(big, {f"d{i % 20}/n{i}.md": f"# Note {i}\n\nField notes number {i}.\n"
                     for i in range(1500)})
    env = _env(home)
    _ingest(env, share, "default")
    ingest_env = hash_env(prefect_api, home, PYTHONPATH=str(REPO))

    async def body(session: ClientSession):
        ingest = await anyio.open_process(
            [sys.executable, "-m", "kbsync", "-v", "ingest", f"big={big}", "--json"],
            env=ingest_env, cwd=REPO)
        try:
            assert ingest.stderr is not None
            seen = b""
            async for chunk in ingest.stderr:  # the event: the flow serves reads on its relay
                seen += chunk
                if b"serving reads of" in seen:
                    break
            assert b"serving reads of" in seen, seen[-2000:]
            found = await session.call_tool("search", {"query": "nightly backups", "k": 1})
            listed = await session.call_tool("namespaces", {})
            still_running = ingest.returncode is None
            async for _ in ingest.stderr:  # drain, so the flow never blocks on a full pipe
                pass
            assert await ingest.wait() == 0
        finally:
            if ingest.returncode is None:
                ingest.kill()
        return found, listed, still_running

    found, listed, still_running = _serve(env, body, tmp_path / "mcp.log")
    assert still_running, "the ingest ended before the calls: make the share larger"
    assert not found.is_error, found.content
    assert found.structured_content["results"][0]["doc_id"] == "kb/guides/backup.md"
    assert not listed.is_error and listed.structured_content["namespaces"]["default"][
        "documents"] >= len(DOCS)
