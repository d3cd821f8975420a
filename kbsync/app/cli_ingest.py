"""``kbsync ingest``: a Prefect flow run where a Prefect API is configured, else the plain runner.

Both ways run the one ingest runner (:func:`kbsync.ingest.runner.run_ingest`): the same
checks, plan, write order, locks (:func:`kbsync.app.locks.write_locks`), model choice,
JSON summary, exit codes and one-line errors. They differ only in what is recorded:

- **A Prefect API is configured** (``PREFECT_API_URL`` in the environment, or in the active
  Prefect profile): the ``ingest`` flow runs in this process, a flow run on that server with
  its ``ingest-root`` subflows and tasks (a root with nothing to write has none), its
  summary artifact and failures table, its logs, and the ``kbsync.sync.finished`` event.
  A run that turns out to have nothing to write (planned first in this process, no
  Prefect imported: :mod:`kbsync.app.cli_recorded`) is recorded as the same flow run, with
  the same name, state, logs, artifacts and event, over Prefect's REST API, without the
  flow's check task runs; the first root with something to write hands the whole run to
  the flow. A first ingest and ``--force`` go to the flow at once.
- **None is** (the default): the runner's in-process executor. Nothing goes to Prefect (no
  run, artifact, log or event); the log lines the flow would write (one WARNING per failed
  file; the embedding model and the count line at INFO, shown with ``-v``) go to stderr,
  and the JSON summary is the run's record.

Measured (tests/bench/README.md, "No-op sync"): before, a CLI run without an API started
Prefect's temporary server: 13-23 s for a no-op of 300 pages that takes 1.1 s without it,
for run records in ``$PREFECT_HOME``'s database that only a later ``prefect server start``
would show. Who wants run history runs a server and sets ``PREFECT_API_URL``.
"""

from __future__ import annotations

import logging

from kbsync.app.cli_support import EXIT_OK, EXIT_PARTIAL, emit, run_result

log = logging.getLogger("kbsync.app.cli")


def prefect_api_configured() -> bool:
    """Whether Prefect would send a run to an API: ``PREFECT_API_URL`` in the environment,
    or in the active profile of ``$PREFECT_HOME/profiles.toml`` (read without importing
    Prefect, whose import costs 1-2 s: :func:`kbsync.app.prefect_rest.prefect_settings`).
    Limit: a ``prefect.toml`` or ``pyproject.toml`` naming an API is not read; set the
    variable."""
    from kbsync.app.prefect_rest import prefect_settings

    return bool(prefect_settings().get("PREFECT_API_URL"))


def ingest(args, settings, failed) -> int:
    """The ``ingest`` command; its exit code. ``failed(exc) -> int`` reports an error the
    way every command does (the watchdog's lost-API handler needs it)."""
    from kbsync.catalog.identity import check_roots
    from kbsync.catalog.lock import refuse_if_held
    from kbsync.ingest.discover import parse_root

    # A missing, empty or overlapping root is a usage error before any run exists.
    check_roots([parse_root(root) for root in args.roots], home=settings.home)
    refuse_if_held(settings, args.namespace)  # before anything costly starts
    _start_early(settings, args)
    if prefect_api_configured():
        from kbsync.app.cli_recorded import recorded_if_idle

        # Nothing to write: the plain runner, recorded as a flow run over REST; else the flow.
        summary = recorded_if_idle(args, settings)
        if summary is None:
            summary = _flow_run(args, settings, failed)
    else:
        summary = _plain_run(args, settings)
    if args.json:
        emit(summary)
    else:
        from kbsync.app.console import print_ingest

        print_ingest(summary)
    return EXIT_PARTIAL if summary["failed"] else EXIT_OK


def _flow_run(args, settings, failed) -> dict:
    """The ``ingest`` flow against the configured API; its JSON summary."""
    from flows.ingest import ingest as ingest_flow  # late: Prefect's import costs seconds

    from kbsync.app.cli_plain import flow_parameters
    from kbsync.app.console import ingest_status
    from tasks.watchdog import exit_now, set_lost_handler, watch_orchestrator

    # A lost Prefect API: the usual error line (and JSON object), then exit at once.
    set_lost_handler(lambda exc: exit_now(failed(exc)))
    with watch_orchestrator(settings), ingest_status(enabled=not args.json):
        state = ingest_flow(**flow_parameters(args), return_state=True)
    return run_result(state.result(raise_on_failure=False))


def _plain_run(args, settings) -> dict:
    """The runner in this process (no Prefect imported); its JSON summary.

    Raises what the flow's run would end on (a refusal, an outage, Ctrl-C), the counts
    reached attached (:func:`kbsync.ingest.summary.counts_of`).
    """
    from kbsync.app.cli_plain import PlainExecutor, plain_request, run_in_process
    from kbsync.app.locks import write_locks
    from kbsync.ingest.report import count_line, log_failures

    executor = PlainExecutor(settings, locks=write_locks(settings))
    result, embedder = run_in_process(plain_request(args), executor, status=not args.json)
    log_failures(log, result)  # one WARNING per failed file, as the flow's log
    log.info("embedding model: %s", embedder)
    log.info("%s", count_line(result))
    return result


def _start_early(settings, args) -> None:
    """On a first ingest into the embedded store (its collection not yet there: every file
    will be converted), start the conversion forkserver now, while the run imports and
    opens what it needs. Other runs start it on their first file: a no-op re-run must not
    pay for importing the converters."""
    from kbsync.app.cli_plain import first_ingest

    if settings.convert_isolation and not args.dry_run and first_ingest(settings):
        from kbsync.convert.isolate import start_forkserver

        start_forkserver()
