"""The ``mcp`` subcommand of ``kbsync`` (wired in by :mod:`kbsync.app.cli`): an MCP server on
stdio for agents (:mod:`kbsync.mcp_server`, docs/agents.md)."""

from __future__ import annotations


def register(sub) -> None:
    """Add ``mcp`` to the ``kbsync`` subparsers."""
    sub.add_parser(
        "mcp", help="serve the knowledge base to an agent over MCP on stdio (tools: search, ask, "
                    "namespaces); reads your own store, or KBSYNC_SERVER's (docs/agents.md)",
        description="An MCP server on stdin/stdout for an agent's client, which starts it as "
                    "you: tools search, ask and namespaces, each reply filtered for your user. "
                    "It reads your own store (KBSYNC_HOME), or the shared index of "
                    "KBSYNC_SERVER (kbsync serve; KBSYNC_TOKEN for HTTP). Runs until the "
                    "client closes stdin; logs go to stderr. Configuration: docs/agents.md.")


def run_mcp(args, settings) -> int:
    """``kbsync mcp``: serve until the client closes stdin; exit 0."""
    from kbsync.mcp_server import serve_stdio

    serve_stdio(settings)
    return 0


COMMANDS = {"mcp": run_mcp}
"""Subcommand name -> handler ``(args, settings) -> exit code``, merged into cli.main's table."""
