"""The counters a stage may add to the run summary, as one enum.

Every member is a numeric field of :class:`kbsync.ingest.summary.IngestSummary`
(``tests/ingest/test_counters.py`` checks it), and the summary refuses a key
that is not a member, so no count is dropped without a word. Members are
strings (``Count.ADDED == "added"``), so the JSON and a ``Counter``'s keys read
as before.
"""

from __future__ import annotations

from enum import Enum


class Count(str, Enum):
    """A counter of the ingest summary."""

    ADDED = "added"
    UPDATED = "updated"
    PARTIAL = "partial"
    CHUNKS_RAW = "chunks_raw"
    CHUNKS_KEPT = "chunks_kept"
    EMBEDDINGS_COMPUTED = "embeddings_computed"
    EMBEDDINGS_CACHED = "embeddings_cached"
    EMBEDDINGS_FAILED = "embeddings_failed"
    EMBEDDINGS_TRUNCATED = "embeddings_truncated"
    EMBEDDING_BISECT_REQUESTS = "embedding_bisect_requests"
    CONVERTER_WARNINGS = "converter_warnings"

    def __str__(self) -> str:
        return self.value
