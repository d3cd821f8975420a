"""``kbsync ingest``: a Prefect flow run where a Prefect API is configured, else the plain runner.

Both ways run the one ingest runner (:func:`kbsync.ingest.runner.run_ingest`): the same
checks, plan, write order, locks (:func:`kbsync.app.locks.write_locks`), model choice,
JSON summary, exit codes and one-line errors. They differ only in what is recorded:

- **A Prefect API is configured** (``PREFECT_API_URL`` in the environment, or in the active
  Prefect profile): the ``ingest`` flow runs in this process, a flow run on that server with
  its ``ingest-root`` subflows and tasks (a root with nothing to write has none), its
  summary artifact and failures table, its logs, and the ``kbsync.sync.finished`` event.
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
import os
from pathlib import Path
from typing import Sequence

from kbsync.app.cli_support import EXIT_OK, EXIT_PARTIAL, emit, run_result

log = logging.getLogger("kbsync.app.cli")


def prefect_api_configured() -> bool:
    """Whether Prefect would send a run to an API: ``PREFECT_API_URL`` in the environment,
    or in the active profile of ``$PREFECT_HOME/profiles.toml`` (read without importing
    Prefect, whose import costs 1-2 s). Limit: a ``prefect.toml`` or ``pyproject.toml``
    naming an API is not read; set the variable."""
    if os.environ.get("PREFECT_API_URL"):
        return True
    home = Path(os.environ.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()
    path = Path(os.environ.get("PREFECT_PROFILES_PATH") or home / "profiles.toml").expanduser()
    try:
        import tomllib

        profiles = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    active = os.environ.get("PREFECT_PROFILE") or profiles.get("active") or "ephemeral"
    values = profiles.get("profiles", {}).get(active, {})
    return bool(isinstance(values, dict) and values.get("PREFECT_API_URL"))


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
        summary = _flow_run(args, settings, failed)
    else:
        summary = _plain_run(args, settings)
    if args.json:
        emit(summary)
    else:
        from kbsync.app.console import print_ingest

        print_ingest(summary)
    return EXIT_PARTIAL if summary["failed"] else EXIT_OK


def _globs(patterns: Sequence[str]) -> list[str]:
    """Globs in the display form of relative paths (``\\xNN``, as in doc_ids), which they match."""
    from kbsync.models import display_text

    return [display_text(g) for g in patterns]


def _flow_run(args, settings, failed) -> dict:
    """The ``ingest`` flow against the configured API; its JSON summary."""
    from flows.ingest import ingest as ingest_flow  # late: Prefect's import costs seconds

    from kbsync.app.console import ingest_status
    from kbsync.ingest.discover import root_parameter
    from kbsync.models import SyncMode
    from tasks.watchdog import exit_now, set_lost_handler, watch_orchestrator

    # A lost Prefect API: the usual error line (and JSON object), then exit at once.
    set_lost_handler(lambda exc: exit_now(failed(exc)))
    with watch_orchestrator(settings), ingest_status(enabled=not args.json):
        state = ingest_flow(
            roots=[root_parameter(r) for r in args.roots], namespace=args.namespace,
            mode=SyncMode(args.mode), force=args.force, dry_run=args.dry_run,
            include=_globs(args.include), exclude=_globs(args.exclude),
            allow_mass_delete=args.allow_mass_delete,
            max_delete_fraction=args.max_delete_fraction, rebind=args.rebind,
            return_state=True)
    return run_result(state.result(raise_on_failure=False))


def _plain_run(args, settings) -> dict:
    """The runner in this process (no Prefect imported); its JSON summary.

    Raises what the flow's run would end on (a refusal, an outage, Ctrl-C), the counts
    reached attached (:func:`kbsync.ingest.summary.counts_of`).
    """
    from kbsync.app.console import ingest_status
    from kbsync.app.locks import write_locks
    from kbsync.app.cli_plain import PlainExecutor
    from kbsync.ingest.discover import parse_root
    from kbsync.ingest.plan import DeleteGuard
    from kbsync.ingest.report import count_line, log_failures
    from kbsync.ingest.runner import IngestRequest, run_ingest
    from kbsync.models import SyncMode

    request = IngestRequest(
        roots=tuple(parse_root(r) for r in args.roots), namespace=args.namespace,
        mode=SyncMode(args.mode), force=args.force, dry_run=args.dry_run,
        include=tuple(_globs(args.include)), exclude=tuple(_globs(args.exclude)),
        guard=DeleteGuard(args.allow_mass_delete, args.max_delete_fraction), rebind=args.rebind)
    executor = PlainExecutor(settings, locks=write_locks(settings))
    try:
        with ingest_status(enabled=not args.json):
            result = run_ingest(request, executor).to_dict()
        embedder = executor.describe_embedder()
    finally:
        executor.close()
    log_failures(log, result)  # one WARNING per failed file, as the flow's log
    log.info("embedding model: %s", embedder)
    log.info("%s", count_line(result))
    return result


def _start_early(settings, args) -> None:
    """On a first ingest into the embedded store (its collection not yet there: every file
    will be converted), start the conversion forkserver now, while the run imports and
    opens what it needs. Other runs start it on their first file: a no-op re-run must not
    pay for importing the converters."""
    if settings.convert_isolation and not args.dry_run and _first_ingest(settings):
        from kbsync.convert.isolate import start_forkserver

        start_forkserver()


def _first_ingest(settings) -> bool:
    """No chunk collection yet in the embedded store (looked for, never opened)."""
    if settings.qdrant_url:
        return False
    from kbsync.store.edge.query import collection_created

    return not collection_created(settings.store_path, settings.collection)
