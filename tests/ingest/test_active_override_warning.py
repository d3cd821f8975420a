"""The warning when KBSYNC_* values differ from the build the active collection was made
with names only the differing settings, each with its built value (issue 22: it listed all
seven settings, read "kbsync of kbsync" and "differ" for one setting)."""

from __future__ import annotations

import logging

from kbsync.catalog import active
from kbsync.settings import Settings
from kbsync.store.active import ActiveRecord


def test_the_warning_names_only_what_differs(caplog, tmp_path):
    configured = Settings(home=tmp_path, chunk_tokens=200)
    record = ActiveRecord(logical="kbsync", active="kbsync", build={"chunk_tokens": None})
    resolved = active.apply_build(configured, record.build)
    active._warned.clear()
    with caplog.at_level(logging.WARNING, logger=active.log.name):
        active._warn_overrides(configured, resolved, record)
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("KBSYNC_CHUNK_TOKENS=200 differs from collection kbsync, which "
                           "was built with chunk_tokens=default:"), line
    assert "embed_provider" not in line and "kbsync of kbsync" not in line


def test_a_rebuilt_collection_is_named_with_what_serves_it(caplog, tmp_path):
    configured = Settings(home=tmp_path, chunk_tokens=200, chunk_overlap=10)
    record = ActiveRecord(logical="kbsync", active="kbsync__r1",
                          build={"chunk_tokens": 400, "chunk_overlap": None})
    resolved = active.apply_build(configured, record.build)
    active._warned.clear()
    with caplog.at_level(logging.WARNING, logger=active.log.name):
        active._warn_overrides(configured, resolved, record)
    [line] = [r.getMessage() for r in caplog.records]
    assert "KBSYNC_CHUNK_TOKENS=200, KBSYNC_CHUNK_OVERLAP=10 differ from collection kbsync " \
           "(served from kbsync__r1), which was built with chunk_tokens=400, " \
           "chunk_overlap=default" in line, line
