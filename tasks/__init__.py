"""Prefect task wrappers over the kbsync core (retries, batching; no tags: see ingest_tasks).

Importing the package sends the core's ``kbsync.*`` log records to the run's logs
(:mod:`tasks.logs`): every flow module imports it, whoever started the run.
"""

from tasks.logs import forward_core_logs

forward_core_logs()
