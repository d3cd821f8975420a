"""``kbsync serve``: one index, many readers, each through the one permission filter (issue 40).

- :mod:`kbsync.serve.handler`: the request handler every door shares (operations, limits,
  the reader as ``as_user``).
- :mod:`kbsync.serve.holder`: the store, shared with the nightly ingest (handed over on request).
- :mod:`kbsync.serve.unix`: the Unix socket door (``SO_PEERCRED`` names the reader).
- :mod:`kbsync.serve.http`: the HTTP door (bearer tokens, stored hashed).
- :mod:`kbsync.serve.client`: ``connect_from_env`` for ``kbsync search/ask/stats`` and ``kbsync mcp``.
- :mod:`kbsync.serve.access_log`: one line per request.

See docs/serving.md.
"""
