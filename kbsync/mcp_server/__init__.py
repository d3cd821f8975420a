"""``kbsync mcp``: the knowledge base as a Model Context Protocol server on stdio.

Built on the official ``mcp`` SDK (2.x, :class:`mcp.server.mcpserver.MCPServer`). An agent's
client starts ``kbsync mcp`` as the reader (their own user), and reads through one of two
backends (:mod:`kbsync.mcp_server.backend`): the reader's own private store in process, or
a shared index through ``KBSYNC_SERVER`` (``kbsync serve``), which names the caller itself.
Either way the one permission filter decides what is seen; nothing here widens it.

The tools (:mod:`kbsync.mcp_server.tools`) are ``search``, ``ask`` and ``namespaces``. Stdout
is the protocol's channel: every log line goes to stderr. The package is not named ``mcp``,
which would shadow the SDK. Docs: docs/agents.md.
"""

from __future__ import annotations

import logging

from kbsync.settings import Settings

log = logging.getLogger(__name__)


def serve_stdio(settings: Settings) -> None:
    """Serve MCP on stdin/stdout until the client closes stdin.

    Raises:
        UsageError: ``KBSYNC_SERVER`` is set and cannot be used (see
            :func:`kbsync.mcp_server.backend.choose_backend`).
    """
    from kbsync.mcp_server.backend import choose_backend
    from kbsync.mcp_server.tools import build_server

    backend = choose_backend(settings)
    log.info("kbsync mcp: serving on stdio, reading %s", backend.name)
    try:
        build_server(backend).run("stdio")
    finally:
        backend.close()
