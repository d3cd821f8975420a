"""The ``rollback`` and ``restore`` flows: ``kbsync rebuild --rollback`` and ``--restore NAME``
from the Prefect UI (deployments ``rollback/rollback`` and ``restore/restore``).

Each is a thin door over the code the CLI calls (:func:`kbsync.maintenance.rebuild.rollback_locked`,
:func:`~kbsync.maintenance.rebuild.restore_locked`), under the same write lock, decided by
the flows' rule (:func:`tasks.locking.flow_locks`). Both switch what search serves at once,
so each asks for ``confirm``: without it the run changes nothing, logs one WARNING line
saying what it would do, and ends Completed named ``Refused`` (not red: nothing failed).
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from prefect import flow, get_run_logger
from prefect.states import Completed
from pydantic import Field

from kbsync.maintenance.rebuild import restore_locked, rollback_locked, serving_line
from kbsync.settings import load_settings
from tasks.locking import flow_locks


def _refused(what: str) -> Any:
    message = f"not confirmed: {what} changes what search serves; run again with confirm true"
    get_run_logger().warning("%s refused: %s", what.split(" ", 1)[0], message)
    # A flow may return a State to set its final state (see flows/rebuild.py).
    return Completed(name="Refused", message=message, data={"refused": message})


@flow(name="rollback", flow_run_name="rollback: {namespace}", log_prints=False,
      validate_parameters=True)
def rollback(confirm: bool = False,
             namespace: Annotated[str, Field(min_length=1, max_length=200)] = "default",
             ) -> dict[str, Any]:
    """Serve the collection the last rebuild replaced again (kbsync rebuild --rollback).

    Args:
        confirm: Must be true: the rollback switches what search serves at once (the replaced collection becomes the one kept for the next rollback).
        namespace: Namespace whose write lock is held meanwhile (the pointer is the whole collection's).
    """  # noqa: E501 - one line per parameter keeps Prefect's docstring parser exact
    if not confirm:
        return _refused("rollback of the active collection")
    started = time.perf_counter()
    settings = load_settings()
    pointer = rollback_locked(flow_locks(settings), namespace)
    get_run_logger().info("rollback: %s", serving_line(pointer))
    return {"rolled_back": True, "pointer": pointer,
            "duration_s": round(time.perf_counter() - started, 3)}


@flow(name="restore", flow_run_name="restore: {name}", log_prints=False,
      validate_parameters=True)
def restore(name: Annotated[str, Field(min_length=1, max_length=200)], confirm: bool = False,
            namespace: Annotated[str, Field(min_length=1, max_length=200)] = "default",
            ) -> dict[str, Any]:
    """Point the collection at NAME again, e.g. after its active pointer was lost (kbsync rebuild --restore NAME).

    Args:
        name: The collection to serve: KBSYNC_COLLECTION itself or one of its rebuilt <name>__r<N>.
        confirm: Must be true: the restore switches what search serves at once.
        namespace: Namespace whose write lock is held meanwhile (the pointer is the whole collection's).
    """  # noqa: E501 - one line per parameter keeps Prefect's docstring parser exact
    if not confirm:
        return _refused(f"restore of {name}")
    settings = load_settings()
    pointer = restore_locked(flow_locks(settings), name, namespace)
    get_run_logger().info("restore: %s", serving_line(pointer))
    return {"restored": True, "pointer": pointer}
