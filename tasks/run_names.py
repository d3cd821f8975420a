"""Flow run names after what the run did, as a scheduler names its jobs.

Prefect names a run at random (``auspicious-prawn``) unless the flow gives a
``flow_run_name``. These functions are such names: Prefect calls them, without
arguments, when the run starts, and they read the run's parameters and deployment
from :mod:`prefect.runtime`. Pure string work on the parameters: a name never
touches a disk or raises for a bad root (the run's own checks report that).

- ``ingest``: ``DEPLOYMENT: ROOTS MODE [dry-run]`` (``nightly-sync: docs,wiki
  incremental``; a run from the CLI or a plain call is ``ingest: ...``);
- ``evaluate``: ``DEPLOYMENT: NAMESPACE MODES`` (``nightly-eval: default hybrid``);
- ``rebuild``: ``DEPLOYMENT: NAMESPACE BUILD`` (``rebuild: default chunk_tokens=200``).
"""

from __future__ import annotations

from typing import Any

from kbsync.ingest.run_record import (NAME_LIMIT, ingest_name, joined,  # noqa: F401
                                      root_label, run_name_text)


def _prefix(flow: str) -> str:
    from prefect.runtime import deployment

    try:
        return deployment.name or flow
    except Exception:  # noqa: BLE001 - no API reachable for the lookup: the flow's name
        return flow


def _params() -> dict[str, Any]:
    from prefect.runtime import flow_run

    return dict(flow_run.parameters or {})


def evaluate_name(params: dict[str, Any], prefix: str = "evaluate") -> str:
    """``PREFIX: NAMESPACE MODES`` for the ``evaluate`` flow's parameters."""
    modes = joined(params.get("modes") or ["hybrid"])
    return run_name_text(f"{prefix}: {params.get('namespace', 'default')} {modes}")


def rebuild_name(params: dict[str, Any], prefix: str = "rebuild") -> str:
    """``PREFIX: NAMESPACE KEY=VALUE ...`` (the requested build settings) for the ``rebuild``
    flow's parameters."""
    build = params.get("build") or {}
    if hasattr(build, "model_dump"):  # the flow's typed BuildSettings, in process
        build = build.model_dump(mode="json")
    # An empty field of the form keeps the worker's setting: not named.
    said = " ".join(f"{key}={value}" for key, value in sorted(build.items())
                    if value is not None) or "same settings"
    return run_name_text(f"{prefix}: {params.get('namespace', 'default')} {said}")


def ingest_run_name() -> str:
    """The ``flow_run_name`` of the ``ingest`` flow (see :func:`ingest_name`)."""
    return ingest_name(_params(), _prefix("ingest"))


def evaluate_run_name() -> str:
    """The ``flow_run_name`` of the ``evaluate`` flow (see :func:`evaluate_name`)."""
    return evaluate_name(_params(), _prefix("evaluate"))


def rebuild_run_name() -> str:
    """The ``flow_run_name`` of the ``rebuild`` flow (see :func:`rebuild_name`)."""
    return rebuild_name(_params(), _prefix("rebuild"))
