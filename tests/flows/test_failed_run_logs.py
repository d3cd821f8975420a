"""A run that ends Failed logs no fake engine crash, and keeps its result reachable (#14.2).

Prefect resolves a Failed state's data into an exception. The flows returned
``Failed(data=<dict>)``, so right after "Finished in state Failed" the engine logged
``Engine execution exited with unexpected exception ... dict cannot be resolved
into an exception``: the only red line of the run looked like a crash of kbsync.
"""

from __future__ import annotations

import logging

import pytest

from flows.ingest import ingest
from kbsync.errors import FilesFailed
from kbtest import write_tree

CRASH_LINES = ("Engine execution exited with unexpected exception",
               "cannot be resolved into an exception")


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + logging.Formatter().formatException(record.exc_info)
        self.lines.append(text)


@pytest.fixture
def prefect_log():
    handler = _Collect()
    logger = logging.getLogger("prefect")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def _share(tmp_path):
    share = tmp_path / "share"
    write_tree(share, {"good.md": "# Good\n\nFine text."})
    (share / "broken.pdf").write_bytes(b"%PDF-1.7 this is not really a pdf")
    return share


def test_a_failed_file_ends_failed_without_a_fake_crash(prefect_api, settings, tmp_path,
                                                        prefect_log):
    state = ingest(roots=[str(_share(tmp_path))], namespace="no-crash", return_state=True)
    assert state.is_failed() and state.message == "1 of 2 files failed"
    carried = state.result(raise_on_failure=False)
    assert isinstance(carried, FilesFailed)
    assert carried.result["added"] == 1 and carried.result["failed"] == 1
    log = "\n".join(prefect_log.lines)
    assert "Failed" in log
    assert not any(line in log for line in CRASH_LINES), log


def test_a_direct_call_raises_the_typed_error_with_the_summary(prefect_api, settings, tmp_path,
                                                               prefect_log):
    with pytest.raises(FilesFailed) as raised:
        ingest(roots=[str(_share(tmp_path))], namespace="no-crash-direct")
    assert raised.value.result["failures"][0]["error"] == "CorruptDocument"
    log = "\n".join(prefect_log.lines)
    assert not any(line in log for line in CRASH_LINES), log


def test_a_worker_run_that_fails_logs_no_engine_crash(prefect_api, settings, tmp_path,
                                                      prefect_log):
    """A worker's flow-run process runs the flow through ``run_flow(..., error_logger=the
    run's logger)`` and asks for its result; a Failed run's result is raised, and the engine
    logged it as "Engine execution exited with unexpected exception" (seen in the UI)."""
    from prefect.flow_engine import run_flow

    with pytest.raises(FilesFailed):
        run_flow(ingest, parameters={"roots": [str(_share(tmp_path))], "namespace": "worker"},
                 error_logger=logging.getLogger("prefect.flow_runs"))
    log = "\n".join(prefect_log.lines)
    assert "Finished in state Failed('1 of 2 files failed')" in log
    assert not any(line in log for line in CRASH_LINES), log


def test_other_engine_errors_still_reach_the_log(prefect_log) -> None:
    import tasks  # noqa: F401 - installs the filter

    try:
        raise RuntimeError("a real crash")
    except RuntimeError:
        logging.getLogger("prefect.flow_runs").error(CRASH_LINES[0], exc_info=True)
    assert any("a real crash" in line for line in prefect_log.lines)
