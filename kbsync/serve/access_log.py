"""The access log of ``kbsync serve``: one line per request on the ``kbsync.serve.access``
logger (stderr under the CLI; journald under systemd).

``caller=NAME (uid N) route=unix:search latency_ms=12.3 status=ok results=5 kept=17``;
``status`` is ``ok`` or the error's kind. The query text appears (``query="..."``) only when
the server was started with ``--log-queries`` (or ``KBSYNC_SERVE_LOG_QUERIES=1``).
"""

from __future__ import annotations

import json
import logging

log = logging.getLogger("kbsync.serve.access")


def log_request(*, caller: str, route: str, latency_ms: float, error: str | None,
                counts: dict[str, int], query: str | None) -> None:
    """Write one access line (see module doc)."""
    fields = " ".join(f"{k}={v}" for k, v in counts.items())
    text = f" query={json.dumps(query, ensure_ascii=False)}" if query is not None else ""
    log.info("caller=%s route=%s latency_ms=%.1f status=%s%s%s", caller, route, latency_ms,
             error or "ok", f" {fields}" if fields else "", text)
