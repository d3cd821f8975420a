"""One Prefect test server for the whole session (it takes 10-30 s to start on 2 cores)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "kbsync")


@pytest.fixture(scope="session")
def prefect_api():
    """The API URL of a session-scoped ``prefect_test_harness`` server."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield PREFECT_API_URL.value()
