"""Issue 37: a store on a read-only mount could not even be searched, and said so in a
line about a lock file.

qdrant-edge-py 0.9.0 maps a shard's payload storage read-write even to load it for a
search (``Failed to open mmap payload storage: Permission denied``), so the embedded store
cannot be opened read-only at all. Reads and writes alike get one ``StoreReadOnly`` line
that says so and what to do (copy the home to a writable folder, or a Qdrant server).
Run as root without DAC override, so the permissions hold as for a plain user.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kbtest import KBSYNC, hash_env, write_tree
from kbsync.ingest.discover import parse_root
from kbsync.ingest.runner import run_plain
from kbsync.runtime import Runtime

NO_DAC = ["capsh", "--drop=cap_dac_override,cap_dac_read_search", "--"]
needs_capsh = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("capsh") is None,
    reason="needs root and capsh to run without DAC override (as a plain user would)")
OUTER = ("KBSYNC_", "PREFECT_API_URL")
NO_PREFECT = "http://127.0.0.1:9/api"


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


def _without_dac(env: dict, *argv: str) -> subprocess.CompletedProcess:
    command = " ".join(_quote(a) for a in argv)
    return subprocess.run([*NO_DAC, "-c", command], env=env, capture_output=True, text=True,
                          timeout=300)


def _chmod_tree(top: Path, writable: bool) -> None:
    for folder, dirs, files in os.walk(top):
        for name in [*dirs, *files, "."]:
            path = Path(folder, name)
            mode = path.stat().st_mode & 0o7777
            path.chmod(mode | 0o200 if writable else mode & ~0o222)


@pytest.fixture
def read_only_home(settings, tmp_path):
    """A store of one document under a home without any write permission."""
    write_tree(tmp_path / "share", {"a.md": "# Harbour\n\nThe harbour opens at dawn."})
    runtime = Runtime.open(settings)
    try:
        run_plain([parse_root(str(tmp_path / "share"))], runtime=runtime)
    finally:
        runtime.close()
    _chmod_tree(settings.home, writable=False)
    yield settings.home
    _chmod_tree(settings.home, writable=True)  # so tmp_path can be cleaned


def _refused(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("kbsync: StoreReadOnly: ")
    assert "read-only" in lines[0] and "KBSYNC_HOME" in lines[0]
    return lines[0]


@needs_capsh
def test_stats_on_a_read_only_store_says_why_in_one_line(read_only_home):
    env = hash_env(NO_PREFECT, read_only_home, drop=OUTER)
    proc = _without_dac(env, KBSYNC, "stats", "--json")
    _refused(proc)
    assert json.loads(proc.stdout)["error"]["kind"] == "StoreReadOnly"


@needs_capsh
def test_search_and_writes_on_a_read_only_store_get_the_same_line(read_only_home):
    env = hash_env(NO_PREFECT, read_only_home, drop=OUTER)
    _refused(_without_dac(env, KBSYNC, "search", "harbour"))
    add = ("from kbsync import api\n"
           "try:\n    api.add_text('# N\\n\\nA note.', 'notes/n')\n"
           "except Exception as exc:\n    print(type(exc).__name__, exc)\n")
    proc = _without_dac(env, sys.executable, "-c", add)
    assert proc.stdout.startswith("StoreReadOnly "), proc.stdout + proc.stderr
    # only the segments read-only: the engine's own error, read as the same cause
    _chmod_tree(read_only_home, writable=True)
    _chmod_tree(read_only_home / "qdrant" / "kbsync" / "segments", writable=False)
    assert "Failed to open mmap" in _refused(_without_dac(env, KBSYNC, "search", "harbour"))
    _chmod_tree(read_only_home, writable=True)
    proc = _without_dac(env, KBSYNC, "search", "harbour")
    assert proc.returncode == 0 and "share/a.md" in proc.stdout, proc.stderr
