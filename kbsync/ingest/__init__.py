"""ingest wing."""
