"""``kbsync ingest`` against a Prefect API, when the run has nothing to write: planned here
and recorded over REST (issue 42: a no-op of 300 pages cost 3.1-3.9 s wall against a
running server, 0.2 s of it the run's own work; the rest was Prefect's import and engine).

How: a flow run is opened at the API (:meth:`~kbsync.app.prefect_rest.PrefectRest.start_run`,
Running), and the plain runner runs the request in this process under that run's id, with
an executor that stops at the first root with something to write (:class:`ProbeExecutor`).
- Every root idle: the run is recorded in that flow run (logs, artifacts, event, final
  state: :func:`~kbsync.app.prefect_rest.record_idle_run`) and its summary returned.
- A root with work, or a refusal or outage (which the flow records as its own Failed run,
  with its refusal summary): the flow run opened here is deleted and None returned; the
  caller runs the ``ingest`` flow, which plans again from the start, on the probe's runtime,
  store still open (:func:`_keep_for_the_flow`). What the probe did
  before it stopped is what the flow does first anyway (checks, idle roots' finish: grants
  and capture marks), idempotent, each under the write lock.
- Interrupted, or an internal error: the flow run is ended Crashed, and the error goes on.

Not tried (None at once): a first ingest (no collection yet: every file has work), ``--force``,
an API this client cannot speak to as Prefect would (:func:`~kbsync.app.prefect_rest.rest_settings`),
and an API that does not answer the first call (the flow then reports it as it always has).
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from kbsync.app.cli_plain import PlainExecutor
from kbsync.errors import KbsyncError

log = logging.getLogger(__name__)


class WorkToDo(Exception):
    """The probe reached a root with something to write: the flow takes the run."""


class ProbeExecutor(PlainExecutor):
    """:class:`PlainExecutor` that stops where the run would start a root's own run: the
    runner calls :meth:`run_root` only for a root with something to write
    (:func:`kbsync.ingest.runner.is_idle`), before that root writes anything."""

    def run_root(self, name: str, body: Callable[[], dict]) -> dict:
        raise WorkToDo(name)


def recorded_if_idle(args, settings) -> dict | None:
    """The run's JSON summary when it had nothing to write and is recorded at the API;
    None when the ``ingest`` flow must run it (see the module docstring)."""
    from kbsync.app import cli_plain
    from kbsync.app.prefect_rest import IdleRun, PrefectRest, RestFailed, record_idle_run

    api = PrefectRest.from_environment()
    if api is None or args.force or cli_plain.first_ingest(settings):
        return None
    parameters = cli_plain.flow_parameters(args)
    try:
        flow_id = api.flow_id()
        run_id = api.start_run(flow_id, parameters)
    except RestFailed as exc:
        log.debug("recording over REST not possible (%s): the flow records the run", exc)
        return None
    try:
        with _kept_records() as records:
            summary, embedder = _probe(args, settings, run_id)
    except (WorkToDo, KbsyncError) as exc:
        log.debug("the flow takes the run: %s", exc)
        api.forget_run(run_id)
        return None
    except BaseException as exc:
        api.crash_run(run_id, f"{type(exc).__name__}: {exc}"[:500])
        raise
    try:
        record_idle_run(api, IdleRun(run_id=run_id, flow_id=flow_id, parameters=parameters,
                                     summary=summary, ended=time.time(), embedder=embedder,
                                     records=records))
    except (KeyboardInterrupt, SystemExit) as exc:  # never left Running
        api.crash_run(run_id, f"{type(exc).__name__} while the run was recorded")
        raise
    return summary


def _probe(args, settings, run_id: str) -> tuple[dict, str]:
    """The run in this process under ``run_id``, stopped by :class:`WorkToDo` at the first
    root with something to write, or ended by a refusal (a :class:`KbsyncError`): then the
    runtime stays open for the flow (:func:`_keep_for_the_flow`)."""
    from kbsync.app.cli_plain import plain_request, run_keeping_open
    from kbsync.app.locks import write_locks

    executor = ProbeExecutor(settings, locks=write_locks(settings))
    try:
        outcome = run_keeping_open(plain_request(args, run_id), executor, status=not args.json)
    except (WorkToDo, KbsyncError):
        _keep_for_the_flow(executor)
        raise
    except BaseException:
        executor.close()
        raise
    executor.close()
    return outcome


def _keep_for_the_flow(executor: ProbeExecutor) -> None:
    """Give the probe's runtime, store open, to the flow about to run in this process
    (:func:`tasks.resources.adopt`): closing it and opening it again let a ``kbsync serve``
    that had handed the store over take it back in between, and under steady searches keep
    it without a relay, so the flow found the folder locked (StoreUnavailable)."""
    from tasks.resources import adopt  # late: imports Prefect, which the flow needs now

    adopt(executor.runtime)


@contextmanager
def _kept_records() -> Iterator[list[logging.LogRecord]]:
    """The ``kbsync.*`` records logged inside, at the levels the loggers let through (as
    Prefect forwards them to a flow run's log)."""
    from kbsync.app.prefect_rest import KeptRecords

    kept: list[logging.LogRecord] = []
    handler = KeptRecords(kept)
    core = logging.getLogger("kbsync")
    core.addHandler(handler)
    try:
        yield kept
    finally:
        core.removeHandler(handler)
