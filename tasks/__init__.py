"""Prefect task wrappers over the kbsync core (retries, timeouts, tags, batching).

Importing the package sends the core's ``kbsync.*`` log records to the run's logs
(:mod:`tasks.logs`): every flow module imports it, whoever started the run.
"""

from tasks.logs import forward_core_logs

forward_core_logs()
