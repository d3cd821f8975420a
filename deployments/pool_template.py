"""Print a process work-pool job template whose runs get secrets from Prefect Secret blocks.

    python deployments/pool_template.py \\
        --secret KBSYNC_EMBED_API_KEY=kbsync-embed-api-key > kbsync-pool.json
    prefect work-pool update kbsync --base-job-template kbsync-pool.json

Each ``--secret VAR=BLOCK`` becomes the default environment entry
``VAR: "{{ prefect.blocks.secret.BLOCK }}"`` of the pool. The worker resolves the
reference when it starts a flow run, so the value lives only in the Secret block
and in that run's process environment: not in prefect.yaml, not in the
deployment (unlike a reference in a deployment's ``job_variables``, which
``prefect deploy`` resolves and stores). The deployments' own ``env`` entries are
merged on top, key by key.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Sequence

_VAR = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_BLOCK = re.compile(r"^[a-z0-9][a-z0-9-]*$")


def secret_env(pairs: Sequence[str]) -> dict[str, str]:
    """``VAR=BLOCK`` pairs as env entries that reference Secret blocks.

    Raises:
        ValueError: a pair is not ``VAR=BLOCK`` with an upper-case variable name and a
            Prefect block name (lower-case letters, digits, dashes).
    """
    env: dict[str, str] = {}
    for pair in pairs:
        var, sep, block = pair.partition("=")
        if not sep or not _VAR.match(var) or not _BLOCK.match(block):
            raise ValueError("expected VAR=BLOCK (e.g. KBSYNC_EMBED_API_KEY=kbsync-embed-api-key)"
                             f", got {pair!r}")
        env[var] = "{{ prefect.blocks.secret." + block + " }}"
    return env


def pool_template(env: dict[str, str]) -> dict:
    """The process worker's default base job template with ``env`` as its default env."""
    from prefect.workers.process import ProcessWorker

    template = ProcessWorker.get_default_base_job_template()
    template["variables"]["properties"]["env"]["default"] = env
    return template


def main(argv: Sequence[str] | None = None) -> int:
    """Write the template as JSON on stdout."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--secret", action="append", default=[], metavar="VAR=BLOCK",
                        help="environment variable filled from a Secret block (repeatable)")
    args = parser.parse_args(argv)
    try:
        env = secret_env(args.secret)
    except ValueError as exc:
        parser.error(str(exc))
    json.dump(pool_template(env), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
