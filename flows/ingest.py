"""The ``ingest`` flow: the ingest runner (:mod:`kbsync.ingest.runner`) on Prefect.

Each step runs as a task (``convert pydoc 3/15``) and each root as an
``ingest-root`` subflow (:mod:`flows.executor`). The flow ends Failed when a file
failed that did not fail in the namespace's last run (a new failure; after writing
the summary artifact); a run whose failed files all failed last time too (known
failures) ends ``Completed with known failures``. It returns the JSON summary either
way (on a Failed run, as the result of its :class:`FilesFailed`). A refusal ends it
Failed with one ERROR line (:mod:`tasks.refusals`).
"""

from __future__ import annotations

from typing import Annotated

from prefect import flow, get_run_logger
from prefect.runtime import flow_run
from prefect.states import Completed, Failed
from pydantic import Field

from flows.executor import PrefectExecutor
from kbsync.errors import FilesFailed, KbsyncError
from kbsync.catalog.active import resolve
from kbsync.ingest.discover import local_root, parse_root
from kbsync.ingest.plan import DeleteGuard
from kbsync.ingest.summary import counts_of
from kbsync.ingest.runner import IngestRequest, run_ingest
from kbsync.ingest.run_record import KNOWN_FAILURES_NAME, failed_message, known_message
from kbsync.ingest.summary import new_run_id
from kbsync.models import SyncMode
from kbsync.settings import load_settings
from tasks.artifacts import known_failures, publish_refusal, publish_summary
from tasks.locking import flow_locks
from tasks.events import sync_finished
from tasks.resources import release
from tasks.run_names import ingest_run_name
from tasks.refusals import deployment_run, in_form_words, is_refusal, refusal_line
from tasks.run_story import count_line, describe_embedder, log_failures, run_outcome
from tasks.watchdog import FLOW_HOOKS, start_flow_watch

# Parameter descriptions live in the flow's Args docstring: Prefect builds the deployment's
# parameter schema (the UI form) from it and drops `Field(description=...)` metadata.


@flow(name="ingest", flow_run_name=ingest_run_name, log_prints=False, validate_parameters=True,
      **FLOW_HOOKS)
def ingest(
    roots: Annotated[list[str], Field(min_length=1)],
    namespace: Annotated[str, Field(min_length=1, max_length=200)] = "default",
    mode: SyncMode = SyncMode.INCREMENTAL,
    force: bool = False,
    dry_run: bool = False,
    include: list[str] = [],  # noqa: B006 - Prefect parameters need literal defaults
    exclude: list[str] = [],  # noqa: B006
    allow_mass_delete: bool = False,
    max_delete_fraction: Annotated[float, Field(ge=0, le=1)] = 0.5,
    rebind: bool = False,
) -> dict:
    """Sync directories into the knowledge base and return the JSON summary.

    Relative root paths resolve against the run's working directory (the project
    directory for the deployments in prefect.yaml). One line per argument: Prefect
    turns these into the parameter descriptions of the deployment form.

    Args:
        roots: Directories to sync; NAME=PATH sets the doc_id prefix (default: last path part).
        namespace: Tenant/namespace the documents belong to.
        mode: incremental never deletes; full deletes documents of these roots that are gone.
        force: Reprocess every file even if unchanged.
        dry_run: Only plan and report; write nothing.
        include: Glob patterns (relative path or name); only matching files are synced.
        exclude: Glob patterns (relative path or name); matching files are left out.
        allow_mass_delete: Let full mode empty a root or delete over max_delete_fraction.
        max_delete_fraction: Largest share of a root's documents full mode may delete (0-1).
        rebind: A root NAME bound to another path moved here: rebind it, keep its documents; a root overlapping another bound root replaces it (whose documents are removed).
    """  # noqa: E501 - one line per parameter keeps Prefect's docstring parser exact
    logger = get_run_logger()
    # Read once; every step gets these values. resolve(): the collection a rebuild made
    # active, with its build settings (kbsync.catalog.active).
    settings = resolve(load_settings())
    start_flow_watch(settings)  # a lost Prefect API ends the run within a bound (tasks.watchdog)
    # Root paths travel as valid UTF-8 (\xNN for bytes that are not): see root_parameter.
    request = IngestRequest(
        roots=tuple(parse_root(local_root(r)) for r in roots), namespace=namespace, mode=mode,
        force=force, dry_run=dry_run, include=tuple(include), exclude=tuple(exclude),
        guard=DeleteGuard(allow_mass_delete, max_delete_fraction), rebind=rebind,
        run_id=str(flow_run.get_id() or new_run_id()))
    # A new collection's model follows its shares' language, chosen once by the runner under
    # the write lock (kbsync.ingest.model_choice); the executor then runs with it.
    # The flow is the front door: it decides the write lock once (kbsync.catalog.lock).
    executor = PrefectExecutor(settings, run_tags=(f"namespace:{namespace}",),
                               chooses_model=True, locks=flow_locks(settings))
    try:
        summary = run_ingest(request, executor)
        embedder = describe_embedder(executor.settings)
    except KbsyncError as exc:  # a refusal or an outage: the run ends Failed on it, summarised
        if deployment_run():  # the operator reads the run form's parameters, not CLI flags
            exc = in_form_words(exc)
        counts = counts_of(exc)
        if counts and "namespace" in counts:
            log_failures(logger, counts)
        publish_refusal(exc, namespace=namespace, dry_run=dry_run, counts=counts)
        if not is_refusal(exc):
            raise exc
        # One ERROR line, the flow's own: no task or subflow logged it (tasks.refusals).
        line = refusal_line(exc)
        logger.error("%s", line)
        return Failed(message=line, data=exc)  # type: ignore[return-value]
    finally:
        release(executor.settings)  # the chosen model's runtime, when one was chosen
    result = summary.to_dict()
    # Known failures: files that failed in the last run of the namespace too (its failures
    # table); read before this run's table replaces it.
    known = known_failures(namespace) if summary.failed else set()
    new = [f for f in result["failures"] if f.get("doc_id") not in known]
    outcome = run_outcome(result, new=len(new))
    publish_summary(result, outcome=outcome, embedder=embedder)
    log_failures(logger, result, known=known)  # one WARNING per failed file
    logger.info("embedding model: %s", embedder)
    logger.info("%s", count_line(result))
    if not dry_run:
        sync_finished(result)  # the evaluate deployment's trigger, failed files or not
    if new:
        # The summary rides on an exception: Prefect resolves a Failed state's data into one.
        message = failed_message(result, new=len(new))
        # A flow may return a State to set its final state (Prefect resolves it at run time);
        # Prefect's types take the annotation as the only return type.
        return Failed(message=message,  # type: ignore[return-value]
                      data=FilesFailed(message, result))
    if summary.failed:  # every failed file failed last time too: not red, still counted
        return Completed(data=result, name=KNOWN_FAILURES_NAME,  # type: ignore[return-value]
                         message=known_message(result))
    return result
