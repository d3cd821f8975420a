"""Serving scripts and examples for running kbsync under Prefect (see docs/OPERATIONS.md)."""
