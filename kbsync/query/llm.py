"""A chat model behind any OpenAI-compatible ``/v1/chat/completions`` endpoint.

Used for query expansion (MQE, HyDE) and for answers. Configured by
``KBSYNC_LLM_MODEL`` (required: without it there is no chat model),
``KBSYNC_LLM_BASE_URL`` (default OpenAI's) and ``KBSYNC_LLM_API_KEY``.

The official ``openai`` client does the HTTP with ``max_retries=0``: the
bounded retries (transient errors only, exponential backoff with jitter, at
least the server's ``Retry-After`` up to a cap; :mod:`kbsync.retrying`) are
ours, so their number is known and logged. Every client error becomes an
:class:`~kbsync.errors.LLMError` kind, and the key never appears in a message
(server messages are scrubbed).

This module is the one place a chat model comes from: :class:`ChatModel` is what
expansion, answers and evaluation need, :func:`chat_model` makes the configured one.
The ``openai`` package is imported only when a client is made (it takes ~1 s), so a
search without expansion never pays for it.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, Literal, Protocol, overload

from kbsync.errors import LLMError, LLMNotConfigured, LLMPermanentError, LLMTransientError
from kbsync.retrying import FullJitterAtLeastRetryAfter, call_with_retries

if TYPE_CHECKING:
    import openai
    from openai.types.chat import ChatCompletionMessageParam

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_TRANSIENT_STATUS = {408, 409, 429}
_MAX_BACKOFF_S = 8.0  # one search must not hang for minutes on a rate limit
# Full jitter from 0.5 s doubling, at least Retry-After; every wait at most the cap.
_WAIT = FullJitterAtLeastRetryAfter(base_s=0.5, max_s=_MAX_BACKOFF_S, retry_after_max_s=_MAX_BACKOFF_S)


class ChatModel(Protocol):
    """What kbsync needs from a chat model: one reply to a system + user message pair.

    Invariants (as :class:`ChatClient` keeps them): a reply is a non-empty string or an
    exception, never ``""``; a failure is an :class:`~kbsync.errors.LLMError` kind
    (transient or permanent), so a caller can fall back or report it in one line.
    Tests pass stand-ins (``tests/query/test_expansion.py``, ``test_answer.py``).
    """

    def complete(self, system: str, user: str, *, max_tokens: int = 512,
                 temperature: float = 0.0) -> str:
        """The model's reply to one system + user message pair."""


@overload
def chat_model(settings: Any, *, optional: Literal[False] = False) -> ChatModel: ...


@overload
def chat_model(settings: Any, *, optional: Literal[True]) -> ChatModel | None: ...


def chat_model(settings: Any, *, optional: bool = False) -> ChatModel | None:
    """The chat model ``settings`` configure (``KBSYNC_LLM_*``): the one factory behind
    search expansion, ``ask``, evaluation modes and the CLI.

    Args:
        settings: :class:`~kbsync.settings.Settings`.
        optional: return ``None`` when ``KBSYNC_LLM_MODEL`` is unset (search then notes
            that it searched the plain query) instead of raising.

    Raises:
        LLMNotConfigured: a usage error; ``KBSYNC_LLM_MODEL`` is unset and not ``optional``.
    """
    if optional and not settings.llm_model:
        return None
    return ChatClient.from_settings(settings)


class ChatClient:
    """One chat model: ``complete(system, user) -> str``.

    Invariants: a reply is a non-empty string or an exception, never ``""``;
    at most ``max_attempts`` requests per call; only transient errors are
    retried. Safe to share between threads (the openai client is). Inside
    :meth:`within` (a search's expansions) a call ends by the block's deadline.

    Args:
        model: model id sent to the endpoint.
        base_url: endpoint base, e.g. ``http://localhost:8000/v1``.
        api_key: bearer key; ``None`` for servers that need none. Never logged.
        timeout_s: per-request timeout (connect + read), in seconds.
        max_attempts: requests per call, at least 1.
        sleep: how to wait between attempts (tests pass a no-op).
    """

    def __init__(
        self, model: str, *, base_url: str | None = None, api_key: str | None = None,
        timeout_s: float = 30.0, max_attempts: int = 2,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not model:
            raise LLMNotConfigured("no chat model given")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        import openai  # here: the package takes ~1 s to import (see module doc)

        from kbsync.openai_http import redact_url

        self.model = model
        self.base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self.endpoint = redact_url(self.base_url) + "/chat/completions"
        self.max_attempts = max_attempts
        self.timeout_s = timeout_s
        self._secret = api_key or ""
        self._sleep = sleep
        self._local = threading.local()  # an interactive budget (within), per thread
        # A placeholder key keeps OPENAI_API_KEY from the environment out of it.
        self._client = openai.OpenAI(base_url=self.base_url, api_key=api_key or "unused",
                                     timeout=timeout_s, max_retries=0)

    @classmethod
    def from_settings(cls, settings: Any) -> "ChatClient":
        """The chat model the settings describe.

        Raises:
            LLMNotConfigured: ``KBSYNC_LLM_MODEL`` is unset.
        """
        if not settings.llm_model:
            raise LLMNotConfigured(
                "no chat model configured: set KBSYNC_LLM_MODEL (and KBSYNC_LLM_BASE_URL, "
                "KBSYNC_LLM_API_KEY for a non-OpenAI endpoint)")
        key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
        return cls(settings.llm_model, base_url=settings.llm_base_url, api_key=key,
                   timeout_s=settings.llm_timeout_s, max_attempts=settings.llm_max_attempts)

    def complete(self, system: str, user: str, *, max_tokens: int = 512,
                 temperature: float = 0.0) -> str:
        """The model's reply to one system + user message pair.

        Raises:
            LLMTransientError: every attempt failed with a transient error.
            LLMPermanentError: a non-retryable answer, or a reply with no text.
        """
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        messages: list[ChatCompletionMessageParam] = [
            {"role": "system", "content": system}, {"role": "user", "content": user}]
        budget = getattr(self._local, "budget", None)
        if budget is not None:
            from kbsync.embed.query_budget import attempts_within

            deadline, budget_s = budget
            return attempts_within(
                lambda: self._once(messages, max_tokens, temperature), budget_s=budget_s,
                deadline=deadline, attempts=self.max_attempts, wait=_WAIT, sleep=self._sleep,
                timeout=self._request_timeout, where=self._where(), retry_on=LLMTransientError)
        return call_with_retries(
            lambda: self._once(messages, max_tokens, temperature), retry_on=LLMTransientError,
            attempts=self.max_attempts, wait=_WAIT, sleep=self._sleep, on_retry=self._log_retry)

    @contextmanager
    def within(self, deadline: float, budget_s: float) -> Iterator[None]:
        """Calls of this thread inside the block end by ``deadline`` (``time.monotonic()``):
        each request times out with what is left (at most ``timeout_s``), no retry starts
        past it, and a spent budget is one :class:`~kbsync.errors.LLMTransientError`
        naming the endpoint, ``budget_s`` and ``KBSYNC_QUERY_TIMEOUT_S``
        (:func:`kbsync.embed.query_budget.attempts_within`)."""
        previous = getattr(self._local, "budget", None)
        self._local.budget = (deadline, budget_s)
        try:
            yield
        finally:
            self._local.budget = previous

    # -- internals ----------------------------------------------------------------------------
    @contextmanager
    def _request_timeout(self, seconds: float) -> Iterator[None]:
        """Requests of this thread inside the block time out after ``seconds`` (what is
        left of the budget) when that is shorter than ``timeout_s``."""
        previous = getattr(self._local, "timeout_s", None)
        self._local.timeout_s = max(0.001, min(seconds, self.timeout_s))
        try:
            yield
        finally:
            self._local.timeout_s = previous

    def _once(self, messages: list[ChatCompletionMessageParam], max_tokens: int, temperature: float) -> str:
        import openai

        timeout_s = getattr(self._local, "timeout_s", None)
        client = self._client if timeout_s is None else self._client.with_options(timeout=timeout_s)
        try:
            response = client.chat.completions.create(
                model=self.model, messages=messages, max_tokens=max_tokens,
                temperature=temperature)
        except openai.APIStatusError as exc:
            # Not chained: the client's exception quotes the raw body, which may echo the key.
            raise self._status_error(exc) from None
        except openai.APITimeoutError as exc:
            raise LLMTransientError(f"{self._where()}: request timed out") from exc
        except openai.APIConnectionError as exc:
            raise LLMTransientError(f"{self._where()}: connection failed "
                                    f"({self._scrub(str(exc.__cause__ or exc))})") from exc
        except (openai.APIResponseValidationError, ValueError, TypeError, KeyError) as exc:
            raise LLMPermanentError(f"{self._where()}: malformed response "
                                    f"({type(exc).__name__})") from None
        try:
            content = response.choices[0].message.content
        except (AttributeError, IndexError, TypeError) as exc:
            raise LLMPermanentError(f"{self._where()}: malformed response (no choices)") from exc
        if not isinstance(content, str) or not content.strip():
            reason = getattr(response.choices[0], "finish_reason", None)
            raise LLMPermanentError(f"{self._where()}: empty reply (finish_reason {reason})")
        return content

    def _status_error(self, exc: openai.APIStatusError) -> LLMError:
        from kbsync.openai_http import parse_retry_after, server_message, settings_hint

        status = exc.status_code
        text = f"{self._where()}: HTTP {status}: {self._scrub(server_message(exc))}"
        if status in _TRANSIENT_STATUS or status >= 500:
            return LLMTransientError(text, retry_after=parse_retry_after(exc.response.headers))
        return LLMPermanentError(text + settings_hint(status, "LLM"))

    def _log_retry(self, exc: BaseException, attempt: int, delay: float) -> None:
        log.warning("%s (attempt %d of %d); retrying in %.1fs", exc, attempt, self.max_attempts, delay)

    def _where(self) -> str:
        return f"chat endpoint {self.endpoint} (model {self.model!r})"

    def _scrub(self, text: str) -> str:
        from kbsync.openai_http import scrub

        return scrub(text, self._secret)

    def __repr__(self) -> str:  # no key, by construction
        return f"ChatClient(model={self.model!r}, endpoint={self.endpoint!r})"
