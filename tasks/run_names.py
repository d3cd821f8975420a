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

from typing import Any, Iterable

from tasks.run_story import escape_controls

NAME_LIMIT = 120
"""Characters of a run name at most (the rest is cut with an ellipsis)."""


def root_label(spec: str) -> str:
    """The name a root's doc_ids start with: ``NAME`` of ``NAME=PATH``, else the path's last
    part (as :func:`kbsync.ingest.discover.parse_root` decides, without touching the path)."""
    name, sep, path = str(spec).partition("=")
    if sep and name and "/" not in name:
        return name
    parts = [p for p in str(spec).rstrip("/").split("/") if p]
    return parts[-1] if parts else str(spec)


def _prefix(flow: str) -> str:
    from prefect.runtime import deployment

    try:
        return deployment.name or flow
    except Exception:  # noqa: BLE001 - no API reachable for the lookup: the flow's name
        return flow


def _params() -> dict[str, Any]:
    from prefect.runtime import flow_run

    return dict(flow_run.parameters or {})


def _joined(values: Iterable[Any]) -> str:
    return ",".join(str(v) for v in values)


def _name(text: str) -> str:
    text = " ".join(escape_controls(text).split())
    return text if len(text) <= NAME_LIMIT else text[:NAME_LIMIT - 1] + "…"


def ingest_name(params: dict[str, Any], prefix: str = "ingest") -> str:
    """``PREFIX: ROOTS MODE[ dry-run]`` for the ``ingest`` flow's parameters."""
    mode = params.get("mode", "incremental")
    mode = getattr(mode, "value", mode)
    roots = _joined(root_label(r) for r in params.get("roots") or [])
    force = " force" if params.get("force") else ""
    dry = " dry-run" if params.get("dry_run") else ""
    return _name(f"{prefix}: {roots} {mode}{force}{dry}")


def evaluate_name(params: dict[str, Any], prefix: str = "evaluate") -> str:
    """``PREFIX: NAMESPACE MODES`` for the ``evaluate`` flow's parameters."""
    modes = _joined(params.get("modes") or ["hybrid"])
    return _name(f"{prefix}: {params.get('namespace', 'default')} {modes}")


def rebuild_name(params: dict[str, Any], prefix: str = "rebuild") -> str:
    """``PREFIX: NAMESPACE KEY=VALUE ...`` (the requested build settings) for the ``rebuild``
    flow's parameters."""
    build = params.get("build") or {}
    if hasattr(build, "model_dump"):  # the flow's typed BuildSettings, in process
        build = build.model_dump(mode="json")
    # An empty field of the form keeps the worker's setting: not named.
    said = " ".join(f"{key}={value}" for key, value in sorted(build.items())
                    if value is not None) or "same settings"
    return _name(f"{prefix}: {params.get('namespace', 'default')} {said}")


def ingest_run_name() -> str:
    """The ``flow_run_name`` of the ``ingest`` flow (see :func:`ingest_name`)."""
    return ingest_name(_params(), _prefix("ingest"))


def evaluate_run_name() -> str:
    """The ``flow_run_name`` of the ``evaluate`` flow (see :func:`evaluate_name`)."""
    return evaluate_name(_params(), _prefix("evaluate"))


def rebuild_run_name() -> str:
    """The ``flow_run_name`` of the ``rebuild`` flow (see :func:`rebuild_name`)."""
    return rebuild_name(_params(), _prefix("rebuild"))
