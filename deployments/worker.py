"""A process worker for the ``kbsync`` work pool that stops cleanly on the first SIGTERM.

    python deployments/worker.py                        # = prefect worker start --pool kbsync
    python deployments/worker.py --work-queue default --limit 2

Same worker as ``prefect worker start --pool kbsync --type process`` (Prefect's
``ProcessWorker``: same polling, job variables, pull steps and flow-run subprocesses);
only stopping differs. Prefect 3.9's CLI worker turns the first SIGTERM or Ctrl-C into
a SIGINT that does not stop it, and the second into SIGKILL, which leaves its runs
``Running``. Here the first SIGTERM or SIGINT:

1. asks the API to cancel each flow run this worker is executing (as the UI's Cancel
   button does); the worker ends their processes and they end ``Cancelled``, their
   subflows too; the next run finishes their work (the write order makes that safe);
2. waits for them up to ``--grace`` seconds (default 30), then stops the worker and
   exits 0. A run still not final by then is ended with the worker and marked
   ``Crashed`` by prefect.yaml's heartbeat automation.

A second signal while stopping exits at once (status 130); runs still being
cancelled are then left to the heartbeat automation.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import warnings
from collections.abc import Sequence
from typing import Any
from uuid import UUID

import httpx
from prefect.workers.process import ProcessWorker

log = logging.getLogger("kbsync.worker")

POOL = "kbsync"  # prefect.yaml's work pool


# Same dispatch key ("process") as ProcessWorker, so Prefect's worker registry in this
# process points at this class and warns that it replaces the original: expected here.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Type 'StoppableProcessWorker'")

    class StoppableProcessWorker(ProcessWorker):
        """Prefect's process worker, remembering which flow runs it is executing."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.in_flight: set[UUID] = set()

        async def run(self, flow_run, configuration, task_status=None):
            self.in_flight.add(flow_run.id)
            try:
                return await super().run(flow_run, configuration, task_status)
            finally:
                self.in_flight.discard(flow_run.id)


async def cancel_in_flight(worker: StoppableProcessWorker, grace_s: float) -> set[UUID]:
    """Ask the API to cancel the worker's runs, wait up to ``grace_s``; the ids left over."""
    from prefect.client.orchestration import get_client
    from prefect.states import Cancelling

    pending = set(worker.in_flight)
    if not pending:
        return set()
    log.info("cancelling %d flow run(s) in flight: %s", len(pending), sorted(map(str, pending)))
    async with get_client() as client:
        for run_id in pending:
            await client.set_flow_run_state(run_id, Cancelling(
                message="the worker was asked to stop (SIGTERM); re-run to finish the work"))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        while pending and loop.time() < deadline:
            await asyncio.sleep(1)
            pending = {r for r in pending if r in worker.in_flight}
    return pending


async def serve(pool: str, queues: list[str], limit: int | None, grace_s: float) -> int:
    """Run the worker until the first SIGTERM/SIGINT, then stop it as the module says."""
    worker = StoppableProcessWorker(work_pool_name=pool, work_queues=queues or None,
                                    limit=limit)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    running = asyncio.create_task(worker.start(printer=log.info))
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if running.done():  # the worker ended by itself: its error is the exit reason
        stopping.cancel()
        running.result()
        return 0
    log.info("stop requested: no new flow runs")
    for sig in (signal.SIGTERM, signal.SIGINT):  # a second signal: leave now
        loop.add_signal_handler(sig, lambda: sys.exit(130))
    try:
        left = await cancel_in_flight(worker, grace_s)
    except httpx.HTTPError as exc:  # API gone: stop anyway, the crash detection takes over
        log.warning("cannot cancel the runs in flight: %s: %s", type(exc).__name__, exc)
        left = set(worker.in_flight)
    if left:
        log.warning("%d flow run(s) still running after %.0f s; ending them with the worker",
                    len(left), grace_s)
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    log.info("stopped")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments and run the worker (exit 0 after a clean stop)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pool", default=POOL)
    parser.add_argument("--work-queue", action="append", default=[], metavar="NAME",
                        help="serve only this queue (repeatable; default: all of the pool's)")
    parser.add_argument("--limit", type=int, default=None, metavar="N",
                        help="at most N flow runs at once")
    parser.add_argument("--grace", type=float, default=30.0, metavar="S",
                        help="seconds to wait for cancelled runs to end (default 30)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    log.setLevel(logging.INFO)
    try:
        return asyncio.run(serve(args.pool, args.work_queue, args.limit, args.grace))
    except httpx.HTTPError as exc:  # server down or refusing at start: one line, exit 1
        log.error("worker stopped: %s: %s", type(exc).__name__, exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
