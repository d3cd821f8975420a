"""A bound on a run's life once the Prefect API is gone (issue 10.6).

Without it, a run whose Prefect server dies hangs for minutes: every engine call
(create a task run, propose a state, take a concurrency slot) retries with
exponential backoff (``PREFECT_CLIENT_MAX_RETRIES`` = 5: ~62 s per call), and a run
makes many such calls one after another; measured 4-7 minutes, ended by SIGTERM.

The watchdog is a daemon thread started by the ingest flow in the process that runs
it (the CLI's, a worker's flow-run process, ``serve``'s), so the bound holds however
the run was started. It asks ``GET <api>/health`` every few seconds; once the API
has not answered for half of ``KBSYNC_ORCHESTRATOR_TIMEOUT_S`` (default 60 s) it

1. closes the run's store (each engine call in flight finishes first, then the
   shards are flushed): documents whose state was committed stay, a document
   caught mid-write keeps its previous version (the crash-safe write order), so the
   next run converges;
2. reports ``OrchestratorUnavailable`` in one line through the lost handler (the
   CLI's prints its usual error line and JSON object) and ends the process with
   exit status 1: the threads blocked in Prefect's retries cannot be interrupted.

Everything after the detection is bounded by a quarter of the timeout, so the
process ends within the timeout of the API's last answer. ``0`` disables it.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, TypedDict

import httpx

from kbsync.errors import OrchestratorUnavailable
from kbsync.settings import Settings

if TYPE_CHECKING:  # the type only: this module imports Prefect where it needs it
    from prefect.flows import FlowStateHook

log = logging.getLogger(__name__)

LostHandler = Callable[[OrchestratorUnavailable], None]


def exit_now(code: int) -> None:
    """Flush stdout and stderr, then end the process with ``code`` (no cleanup: the
    threads blocked in Prefect's retries would keep it alive)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more to say there
            pass
    os._exit(code)


def default_lost_handler(exc: OrchestratorUnavailable) -> None:
    """One line on stderr (as the CLI prints errors), then exit status 1."""
    sys.stderr.write(f"kbsync: {exc.kind}: {exc}\n")
    exit_now(1)


_handler: LostHandler = default_lost_handler
_state_lock = threading.Lock()
_active = 0  # watchdogs running in this process: an inner run leaves it to the outer one
_fired = False
_flow_dog: "ApiWatchdog | None" = None


def set_lost_handler(handler: LostHandler | None) -> None:
    """Replace how a lost API is reported (``None``: the default). The handler must
    end the process: the run's threads are stuck in Prefect's retries."""
    global _handler
    _handler = handler or default_lost_handler


class ApiWatchdog:
    """Polls ``<api_url>/health`` and calls ``on_lost`` once, when it stays silent.

    Args:
        api_url: the Prefect API base URL (``.../api``).
        timeout_s: the bound: silence of ``timeout_s / 2`` counts as lost.
        on_lost: called once from the watchdog thread with the error.
    """

    def __init__(self, api_url: str, *, timeout_s: float,
                 on_lost: Callable[[OrchestratorUnavailable], None]) -> None:
        self.api_url = api_url.rstrip("/")
        self.silence_s = timeout_s / 2
        self.interval_s = max(0.5, min(5.0, timeout_s / 12))
        self._on_lost = on_lost
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kbsync-api-watchdog",
                                        daemon=True)

    def start(self) -> "ApiWatchdog":
        """Start polling."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop polling (the run ended)."""
        self._stop.set()
        self._thread.join(timeout=self.interval_s + 1)

    def _answers(self, client: httpx.Client) -> bool:
        try:
            return client.get(f"{self.api_url}/health").status_code < 500
        except httpx.HTTPError:  # refused, reset, timed out: silence
            return False

    def _run(self) -> None:
        last_answer = time.monotonic()
        with httpx.Client(timeout=self.interval_s) as client:
            while not self._stop.wait(self.interval_s):
                if self._answers(client):
                    last_answer = time.monotonic()
                    continue
                silent = time.monotonic() - last_answer
                if silent >= self.silence_s:
                    self._on_lost(OrchestratorUnavailable(
                        f"the Prefect API at {self.api_url} has not answered for "
                        f"{silent:.0f} s; the run was stopped and its store closed (documents "
                        "committed stay; one caught mid-write keeps its previous state); run "
                        "it again once the API is back (KBSYNC_ORCHESTRATOR_TIMEOUT_S sets "
                        "this bound)"))
                    return


def _close_store_within(seconds: float) -> None:
    """Close the process's runtimes (flushes the store), waiting at most ``seconds``."""
    from tasks.resources import _close_all

    closer = threading.Thread(target=_close_all, name="kbsync-close-on-api-loss", daemon=True)
    closer.start()
    closer.join(seconds)
    if closer.is_alive():
        log.error("closing the store took over %.0f s; exiting without waiting", seconds)


def _api_url() -> str | None:
    from prefect.settings import PREFECT_API_URL

    return PREFECT_API_URL.value() or None


def _lost_for(timeout_s: float) -> Callable[[OrchestratorUnavailable], None]:
    def lost(exc: OrchestratorUnavailable) -> None:
        global _fired
        with _state_lock:
            if _fired:  # a second watchdog of this process saw it too
                return
            _fired = True
        log.debug("%s", exc)  # the handler reports it, in one line
        _close_store_within(timeout_s / 4)
        _handler(exc)

    return lost


def _start(settings: Settings) -> ApiWatchdog | None:
    """A started watchdog, or ``None`` when disabled, without an API URL (a temporary
    server lives and dies with this process) or when one already runs here."""
    global _active
    timeout_s = settings.orchestrator_timeout_s
    url = _api_url() if timeout_s > 0 else None
    with _state_lock:
        if not url or _active:
            return None
        _active += 1
    return ApiWatchdog(url, timeout_s=timeout_s, on_lost=_lost_for(timeout_s)).start()


def _stop(dog: ApiWatchdog | None) -> None:
    global _active
    if dog is None:
        return
    dog.stop()
    with _state_lock:
        _active -= 1


@contextmanager
def watch_orchestrator(settings: Settings) -> Iterator[None]:
    """Run the block under the watchdog (the CLI wraps its whole flow call in it)."""
    dog = _start(settings)
    try:
        yield
    finally:
        _stop(dog)


def start_flow_watch(settings: Settings) -> None:
    """Start watching from inside a flow's body; :func:`stop_flow_watch` (the flow's
    state hooks) stops it. Hooks run after the engine set the final state, so the
    engine's last API calls are watched too, wherever the flow runs."""
    global _flow_dog
    dog = _start(settings)
    if dog is not None:
        _flow_dog = dog


def stop_flow_watch(*_hook_args, **_hook_kwargs) -> None:
    """Stop what :func:`start_flow_watch` started (a Prefect flow state hook).

    Takes any arguments: the engine passes ``(flow, flow_run, state)`` positionally,
    a worker or runner running on_cancellation hooks passes them by keyword.
    """
    global _flow_dog
    dog, _flow_dog = _flow_dog, None
    _stop(dog)


class FlowHooks(TypedDict):
    """The state-hook keyword arguments of ``@flow``, typed as Prefect's decorator takes them."""

    on_completion: list[FlowStateHook[..., Any]]
    on_failure: list[FlowStateHook[..., Any]]
    on_crashed: list[FlowStateHook[..., Any]]
    on_cancellation: list[FlowStateHook[..., Any]]


FLOW_HOOKS: FlowHooks = {"on_completion": [stop_flow_watch], "on_failure": [stop_flow_watch],
                         "on_crashed": [stop_flow_watch], "on_cancellation": [stop_flow_watch]}
"""Keyword arguments for ``@flow``: stop the flow's watchdog however the run ends."""
