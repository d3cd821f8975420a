"""Rotate a project's API key: create the new key, then revoke the old one after the grace period.

Usage: python rotate_api_keys.py PROJECT_ID [--grace-hours 24]
"""

import argparse
import time

from tessera_admin import Client  # internal admin SDK

GRACE_HOURS_DEFAULT = 24  # matches the API's documented grace period


def rotate(client: Client, project_id: str, grace_hours: int) -> str:
    """Create a new live key and schedule revocation of the current one."""
    old = client.api_keys.current(project_id)
    new = client.api_keys.create(project_id, prefix="tsk_live_")
    client.api_keys.schedule_revocation(old.id, after_s=grace_hours * 3600)
    client.audit.log("api_key_rotated", project=project_id, old=old.id, new=new.id)
    return new.secret


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("project_id")
    parser.add_argument("--grace-hours", type=int, default=GRACE_HOURS_DEFAULT)
    args = parser.parse_args()
    started = time.monotonic()
    secret = rotate(Client.from_env(), args.project_id, args.grace_hours)
    print(f"new key created in {time.monotonic() - started:.1f}s; store it now: {secret[:12]}...")


if __name__ == "__main__":
    main()
