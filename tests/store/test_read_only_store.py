"""Issue 37: a store on a read-only mount could not even be searched, and said so in a
line about a lock file.

qdrant-edge-py 0.9.0 maps a shard's payload storage read-write even to load it for a
search (``Failed to open mmap payload storage: Permission denied``), so the embedded store
reads such a store from a private copy (:mod:`kbsync.store.edge.readonly`): searches and
stats answer as on a writable home and change nothing under it; writes get one
``StoreReadOnly`` line that says what to do. Run as root without DAC override, so the
permissions hold as for a plain user.
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


def _tree(top: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry under ``top``: (mode, size, mtime in ns), to see that nothing changed."""
    seen = {}
    for folder, dirs, files in os.walk(top):
        for name in [*dirs, *files]:
            info = os.lstat(os.path.join(folder, name))
            seen[os.path.relpath(os.path.join(folder, name), top)] = (
                info.st_mode, info.st_size if name not in dirs else 0, info.st_mtime_ns)
    return seen


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


@pytest.fixture
def reader_env(read_only_home, tmp_path):
    """The environment of a reader of ``read_only_home``, with its own TMPDIR (where the
    private copies go, and must be gone after each command)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    return hash_env(NO_PREFECT, read_only_home, drop=OUTER, TMPDIR=str(tmp))


def _refused(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("kbsync: StoreReadOnly: ")
    assert "read-only" in lines[0] and "KBSYNC_HOME" in lines[0]
    return lines[0]


@needs_capsh
def test_search_and_stats_read_a_read_only_store_and_change_nothing(read_only_home,
                                                                     reader_env):
    before = _tree(read_only_home)
    proc = _without_dac(reader_env, KBSYNC, "search", "harbour", "--json")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    hits = json.loads(proc.stdout)["results"]
    assert [h["doc_id"] for h in hits] == ["share/a.md"]
    proc = _without_dac(reader_env, KBSYNC, "stats", "--json")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert json.loads(proc.stdout)["namespaces"]["default"]["documents"] == 1
    api = ("from kbsync import api\n"
           "print(api.search('harbour', k=1).results[0].doc_id)\n")
    proc = _without_dac(reader_env, sys.executable, "-c", api)
    assert proc.stdout.strip() == "share/a.md", proc.stderr
    assert _tree(read_only_home) == before  # not one file made, changed or touched
    assert list(Path(reader_env["TMPDIR"]).iterdir()) == []  # the private copies are gone


@needs_capsh
def test_writes_on_a_read_only_store_get_one_line(read_only_home, reader_env, tmp_path):
    before = _tree(read_only_home)
    write_tree(tmp_path / "more", {"b.md": "# Glacier\n\nThe glacier moves."})
    for argv in (["ingest", str(tmp_path / "more")], ["remove", "--root", "share", "--yes"]):
        line = _refused(_without_dac(reader_env, KBSYNC, *argv))
        assert "cannot be created" in line, line
    add = ("from kbsync import api\n"
           "try:\n    api.add_text('# N\\n\\nA note.', 'notes/n')\n"
           "except Exception as exc:\n    print(type(exc).__name__, exc)\n")
    proc = _without_dac(reader_env, sys.executable, "-c", add)
    assert proc.stdout.startswith("StoreReadOnly "), proc.stdout + proc.stderr
    assert _tree(read_only_home) == before


@needs_capsh
def test_read_only_segments_alone_are_read_from_a_copy_too(read_only_home, reader_env):
    """The home writable, only the segments' files not (the engine's own error): reads
    go through a copy; a write into that store is refused, never made on the copy."""
    _chmod_tree(read_only_home, writable=True)
    _chmod_tree(read_only_home / "qdrant" / "kbsync" / "segments", writable=False)
    proc = _without_dac(reader_env, KBSYNC, "search", "harbour")
    assert proc.returncode == 0 and "share/a.md" in proc.stdout, proc.stderr
    probe = ("from kbsync.store.edge.store import EdgeStore\n"
             "from kbsync.store.base import Filter\n"
             f"store = EdgeStore({str(read_only_home / 'qdrant')!r})\n"
             "print(store.count('kbsync'))\n"
             "try:\n    store.delete('kbsync', Filter.where(namespace='default'))\n"
             "except Exception as exc:\n    print(type(exc).__name__)\n"
             "store.close()\n")
    proc = _without_dac(reader_env, sys.executable, "-c", probe)
    assert proc.stdout.split() == ["1", "StoreReadOnly"], proc.stdout + proc.stderr
    _chmod_tree(read_only_home, writable=True)
    proc = _without_dac(reader_env, KBSYNC, "search", "harbour")
    assert proc.returncode == 0 and "share/a.md" in proc.stdout, proc.stderr
