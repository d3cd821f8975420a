"""The core's ``kbsync.*`` log records in the run's logs, however the run was started.

The core logs through :mod:`logging` only (it has no Prefect import). Prefect
forwards such loggers to the API when ``PREFECT_LOGGING_EXTRA_LOGGERS`` names
them, but reads that setting once, when its first import configures logging.
Only the CLI set it, and before importing Prefect; a worker's or
``deployments/serve.py``'s flow-run process imports Prefect before it loads the
entrypoint, so those runs lost every core warning (a converter's, a retried
batch's). :func:`forward_core_logs` runs when the :mod:`tasks` package is first
imported, which every flow module does, and so does every process that runs a
task (a Dask worker included).
"""

from __future__ import annotations

import logging
import os

CORE_LOGGER = "kbsync"
"""The logger (and, by propagation, every ``kbsync.*`` one) whose records Prefect forwards."""


def forward_core_logs() -> None:
    """Send ``kbsync.*`` records to the run's logs, as ``PREFECT_LOGGING_EXTRA_LOGGERS`` would.

    Adds ``kbsync`` to the variable (kept for processes started from this one),
    imports Prefect (whose first import configures logging from it), and gives the
    ``kbsync`` logger the handlers Prefect gives its extra loggers, those of
    ``prefect.extra`` (the API log handler), in case Prefect was configured before.
    Idempotent: a handler is added once.
    """
    listed = [name.strip() for name in os.environ.get("PREFECT_LOGGING_EXTRA_LOGGERS",
                                                      "").split(",") if name.strip()]
    if CORE_LOGGER not in listed:
        os.environ["PREFECT_LOGGING_EXTRA_LOGGERS"] = ",".join([*listed, CORE_LOGGER])
    # A core record outside any run (the plain runner, `kbsync remove`) has no run to go to:
    # the console shows it; the API handler's default is a UserWarning per record.
    os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
    import prefect.logging.configuration  # noqa: F401 - configures logging on first import

    core = logging.getLogger(CORE_LOGGER)
    for handler in logging.getLogger("prefect.extra").handlers:
        if handler not in core.handlers:
            core.addHandler(handler)


ENGINE_LOGGERS = ("prefect.flow_runs", "prefect.task_runs", "prefect.engine")
"""Where Prefect's engines report the exception a task or flow run ended on."""

ENGINE_EXIT = "Engine execution exited with unexpected exception"


def expected_end(exc: BaseException | None) -> bool:
    """True for an error kbsync raises on purpose to end a run: a refusal (``RootConflict``,
    ``LockHeld``, ``MassDeleteRefused``, ...), an outage (``EmbeddingOutage``,
    ``StoreUnavailable``, ...) or a run that ended Failed by design (``RunEndedFailed``).
    Not :class:`~kbsync.errors.InternalError` (a bug) nor any other exception."""
    from kbsync.errors import InternalError, KbsyncError

    return isinstance(exc, KbsyncError) and not isinstance(exc, InternalError)


def _debugging(record: logging.LogRecord) -> bool:
    """``-v`` (the root logger at DEBUG) or ``PREFECT_LOGGING_LEVEL=DEBUG`` (Prefect's)."""
    return (logging.getLogger().isEnabledFor(logging.DEBUG)
            or logging.getLogger(record.name).isEnabledFor(logging.DEBUG))


QUIET_HOOKS = ("stop_flow_watch",)
"""Hooks of every kbsync run (:data:`tasks.watchdog.FLOW_HOOKS`) whose INFO lines ("Running
hook ...", "Hook ... finished running successfully") say nothing about the run: dropped
unless DEBUG logging is on. A hook that fails still logs its ERROR."""


def _housekeeping(record: logging.LogRecord) -> bool:
    if record.levelno > logging.INFO or not isinstance(record.msg, str):
        return False
    return any(record.msg.startswith((f"Running hook {hook!r}", f"Hook {hook!r} finished"))
               for hook in QUIET_HOOKS)


class ExpectedRunEnd(logging.Filter):
    """Keeps a run that kbsync ended on purpose from reading as a crash of kbsync.

    A refusal or an outage (:func:`expected_end`) is raised through the task, the
    subflow and the flow; each of Prefect's engines logs it at ERROR with a full
    traceback (a ``RootConflict`` gave three, about 100 lines, around a one-line state
    message), and a worker's flow-run process, asking for the run's result, logs it once
    more as "Engine execution exited with unexpected exception". This filter:

    - drops that engine line for such an error (the run's final state already says it);
    - keeps every other record of it, one line: the traceback is cut, unless DEBUG
      logging is on (``-v``, ``PREFECT_LOGGING_LEVEL=DEBUG``), which keeps it whole.

    Any other exception (a bug, :class:`~kbsync.errors.InternalError`) passes untouched.
    It also drops the INFO lines of the :data:`QUIET_HOOKS` (DEBUG keeps them).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if _housekeeping(record):
            return _debugging(record)
        exc = record.exc_info[1] if record.exc_info else None
        if not expected_end(exc):
            return True
        if record.msg == ENGINE_EXIT:
            return False
        if not _debugging(record):
            # The record is shared by every handler: the API's, the console's. The
            # message already holds the error's kind and one-line text (repr of it).
            record.exc_info, record.exc_text = None, None
        return True


def quiet_expected_run_ends() -> None:
    """Install :class:`ExpectedRunEnd` on Prefect's engine loggers (once)."""
    for name in ENGINE_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, ExpectedRunEnd) for f in logger.filters):
            logger.addFilter(ExpectedRunEnd())
