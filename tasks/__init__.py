"""Prefect task wrappers over the kbsync core (retries, timeouts, tags, batching)."""
