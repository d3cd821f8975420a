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


ENGINE_LOGGERS = ("prefect.flow_runs", "prefect.engine")
"""Where Prefect's engine reports the exception a finished run's final state resolves to."""


class ExpectedRunEnd(logging.Filter):
    """Drops Prefect's "Engine execution exited with unexpected exception" for a run that
    ended Failed by design (:class:`kbsync.errors.RunEndedFailed`: files failed, the
    retrieval gate tripped).

    A worker's flow-run process asks the engine for the run's *result*, and the result
    of a Failed state is its exception, raised; the engine then logs it at ERROR with a
    traceback, in the run's logs, right after "Finished in state Failed('1 of 2 files
    failed')". That red line reads as a crash of kbsync. Any other exception passes.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        from kbsync.errors import RunEndedFailed

        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, RunEndedFailed)


def quiet_expected_run_ends() -> None:
    """Install :class:`ExpectedRunEnd` on Prefect's engine loggers (once)."""
    for name in ENGINE_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, ExpectedRunEnd) for f in logger.filters):
            logger.addFilter(ExpectedRunEnd())
