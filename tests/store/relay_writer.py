"""An ingest-like writer for the relay tests: holds the embedded store, serves reads, writes.

Run as ``python relay_writer.py SHARE STOP_FILE`` with ``KBSYNC_*`` set. It opens
the store the way the ingest flow does (``Runtime.open(serve_readers=True)``),
ingests SHARE with kbsync's plain runner, prints ``ready``, then keeps
re-ingesting it with ``force=True`` (every document's points rewritten: upserts,
stale deletes, state commits) until STOP_FILE exists, prints ``runs N`` and
closes the store.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kbsync.ingest.discover import parse_root
from kbsync.ingest.runner import run_plain
from kbsync.runtime import Runtime
from kbsync.settings import Settings


def main(share: str, stop_file: str) -> int:
    runtime = Runtime.open(Settings(), serve_readers=True)
    try:
        roots = [parse_root(share)]
        run_plain(roots, runtime=runtime)
        print("ready", flush=True)
        runs = 1
        while not Path(stop_file).exists():
            summary = run_plain(roots, runtime=runtime, force=True)
            assert summary.failed == 0, summary.failures
            runs += 1
        print(f"runs {runs}", flush=True)
    finally:
        runtime.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
