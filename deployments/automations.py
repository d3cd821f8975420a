"""Register the server-wide automations listed under ``automations:`` in prefect.yaml.

    python deployments/automations.py          # create or replace them on PREFECT_API_URL
    python deployments/automations.py --check  # validate the file only (no server)

``prefect deploy`` registers only each deployment's own ``triggers``, and those can
only run their deployment; an automation that changes another run's state (the
zombie-run detection that marks runs without heartbeats Crashed) lives in a
top-level ``automations`` list, which ``prefect deploy`` ignores. ``prefect
automation create --from-file prefect.yaml`` reads the same list but adds a
duplicate on every call; this script replaces each automation by name (deletes
every automation with that name, then creates the file's version), so running it
again after editing prefect.yaml leaves exactly one of each. ``serve.py`` calls
:func:`sync_automations` when it starts.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:
    from uuid import UUID

    from prefect.events.schemas.automations import AutomationCore

PREFECT_FILE = Path(__file__).resolve().parent.parent / "prefect.yaml"

log = logging.getLogger("kbsync.automations")


def load_automations(prefect_file: Path = PREFECT_FILE) -> list[AutomationCore]:
    """The ``automations`` of a prefect.yaml, validated as Prefect automations (may be empty).

    Raises:
        ValueError: an entry is not a valid automation, or two share a name (a name is
            what makes replacing them idempotent).
    """
    from prefect.events.schemas.automations import AutomationCore
    from pydantic import ValidationError

    data = yaml.safe_load(Path(prefect_file).read_text(encoding="utf-8")) or {}
    automations = []
    for number, entry in enumerate(data.get("automations") or [], 1):
        try:
            automations.append(AutomationCore.model_validate(entry))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise ValueError(f"{prefect_file}: automation {number} ({entry.get('name')!r}): "
                             f"{where}: {first['msg']}") from exc
    names = [a.name for a in automations]
    if len(set(names)) != len(names):
        raise ValueError(f"{prefect_file}: automation names must be unique, got {names}")
    return automations


def sync_automations(automations: Sequence[AutomationCore]) -> list[UUID]:
    """Replace each automation by name on the configured Prefect API; returns the new ids.

    Only automations whose names the file lists are touched. Not atomic: between the
    delete and the create of one automation, that automation is absent for an instant.
    """
    from prefect.client.orchestration import get_client

    ids = []
    with get_client(sync_client=True) as client:
        for automation in automations:
            for old in client.read_automations_by_name(automation.name):
                client.delete_automation(old.id)
            ids.append(client.create_automation(automation))
            log.info("automation %r registered", automation.name)
    return ids


def main(argv: Sequence[str] | None = None) -> int:
    """Validate prefect.yaml's automations and (without --check) register them."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prefect-file", type=Path, default=PREFECT_FILE)
    parser.add_argument("--check", action="store_true", help="validate only; no server")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    log.setLevel(logging.INFO)
    try:
        automations = load_automations(args.prefect_file)
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    if args.check:
        log.info("%d automation(s) valid: %s", len(automations), [a.name for a in automations])
        return 0
    import httpx

    try:
        sync_automations(automations)
    except httpx.HTTPError as exc:  # server down or refusing: one line, exit 1
        log.error("cannot register automations: %s: %s", type(exc).__name__, exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
