"""What the embedding provider and the chat client share about OpenAI-style HTTP.

Both talk to OpenAI-compatible endpoints through the official ``openai``
client; these helpers read a server's ``Retry-After``, keep credentials out of
URLs and messages, and pull the server's own words out of an error response.
Ground floor: imports nothing of kbsync, so ``embed`` and ``query`` may both use it.
"""

from __future__ import annotations

import email.utils
import math
import re
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import openai

MESSAGE_LIMIT = 300  # characters of a server message quoted in one of our errors
KEYLIKE = re.compile(r"\b(sk|key|token)-[A-Za-z0-9_\-*]{6,}", re.IGNORECASE)


def redact_url(url: str) -> str:
    """``url`` without user:password, for messages."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def parse_retry_after(headers: Any) -> float | None:
    """Seconds to wait from ``retry-after-ms`` / ``Retry-After`` (seconds or HTTP date).

    Returns None when absent, unparseable, negative or not finite.
    """
    if headers is None:
        return None
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / divisor
        except ValueError:
            parsed = email.utils.parsedate_tz(value) if name == "retry-after" else None
            if parsed is None:
                continue
            seconds = email.utils.mktime_tz(parsed) - time.time()
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
        return None
    return None


def scrub(text: str, secret: str | None) -> str:
    """``text`` without the key (verbatim or key-like tokens), cut to a one-line size."""
    if secret:
        text = text.replace(secret, "[redacted]")
    return KEYLIKE.sub("[redacted]", text)[:MESSAGE_LIMIT]


def settings_hint(status: int, prefix: str) -> str:
    """The settings a refused request points at, appended to its error: ``" (check
    KBSYNC_EMBED_API_KEY)"`` for 401/403, base URL and model for 404, else empty.

    ``prefix``: ``"EMBED"`` or ``"LLM"``, the endpoint's settings.
    """
    if status in (401, 403):
        return f" (check KBSYNC_{prefix}_API_KEY)"
    if status == 404:
        return f" (check KBSYNC_{prefix}_BASE_URL and KBSYNC_{prefix}_MODEL)"
    return ""


def server_message(exc: openai.APIStatusError) -> str:
    """The server's own error text: ``error.message`` of an OpenAI-style body, else the body."""
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
        if body.get("message"):
            return str(body["message"])
    if isinstance(body, str) and body.strip():
        return body.strip()
    try:
        return exc.response.text.strip() or exc.response.reason_phrase
    except Exception:  # noqa: BLE001 - a streaming body may be unreadable; the status still says enough
        return "no message"
