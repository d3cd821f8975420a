"""Prefect flows of kbsync: ``ingest`` and (later) ``evaluate``."""
