"""Prefect task wrappers over the kbsync core (retries, batching; no tags: see ingest_tasks).

Importing the package sends the core's ``kbsync.*`` log records to the run's logs,
and keeps Prefect's engine from logging a run that ended Failed by design as a
crash (:mod:`tasks.logs`): every flow module imports it, whoever started the run.
"""

from tasks.logs import forward_core_logs, quiet_expected_run_ends

forward_core_logs()
quiet_expected_run_ends()
