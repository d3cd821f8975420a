"""Run a benchmark's child process under a memory cap (a Linux memory cgroup).

Peak RSS counts the pages of mapped files a process has touched (the store's vectors,
payloads and indexes) as well as its own memory. The kernel may drop those file pages
whenever it needs the RAM, so a process on a machine with free RAM shows a peak RSS far
above what it needs. A cap answers the question peak RSS stands for: does the run fit
in N MiB, and what does the cap cost? Under a cgroup limit everything the process
touches is charged, page cache included; at the limit the kernel reclaims the clean
file pages, and the run fails (killed for memory) only when its own memory does not fit.

Needs write access to the memory controller (root on cgroup v1 or v2); ``capped``
raises :class:`CapUnavailable` otherwise, naming why. Not collected by pytest.
"""

from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

CGROUP_ROOT = Path("/sys/fs/cgroup")


class CapUnavailable(RuntimeError):
    """No memory cgroup can be made here."""


class MemoryCap:
    """A memory cgroup of ``limit_mib``: ``popen_kwargs()`` puts a child in it,
    ``peak_mib()`` and ``oom_kills()`` read what it used."""

    def __init__(self, folder: Path, version: int, limit_mib: int) -> None:
        self.folder, self.version, self.limit_mib = folder, version, limit_mib

    def _file(self, v1: str, v2: str) -> Path:
        return self.folder / (v1 if self.version == 1 else v2)

    def popen_kwargs(self) -> dict:
        """``subprocess`` arguments that move the child into the cgroup before it execs."""
        procs = self._file("cgroup.procs", "cgroup.procs")

        def enter() -> None:  # runs in the forked child: its descendants inherit the cgroup
            procs.write_text(str(os.getpid()))

        return {"preexec_fn": enter}

    def peak_mib(self) -> float:
        """The most memory charged to the cgroup (anonymous and page cache), MiB."""
        text = self._file("memory.max_usage_in_bytes", "memory.peak").read_text().strip()
        return int(text) / 2**20

    def oom_kills(self) -> int:
        """Processes the kernel killed for memory inside the cgroup."""
        if self.version == 1:
            text = self._file("memory.oom_control", "").read_text()
        else:
            text = self._file("", "memory.events").read_text()
        fields = dict(line.split() for line in text.splitlines() if len(line.split()) == 2)
        return int(fields.get("oom_kill", 0))


@contextmanager
def capped(limit_mib: int, name: str = "kbsync-bench") -> Iterator[MemoryCap]:
    """A fresh memory cgroup of ``limit_mib`` MiB under this process's own, removed after.

    Raises:
        CapUnavailable: no writable memory controller (not root, or none mounted).
    """
    version, parent = _memory_parent()
    folder = parent / f"{name}-{os.getpid()}"
    try:
        folder.mkdir()
        limit = str(limit_mib * 2**20)
        if version == 1:
            (folder / "memory.limit_in_bytes").write_text(limit)
        else:
            (folder / "memory.max").write_text(limit)
            (folder / "memory.swap.max").write_text("0")
    except OSError as exc:
        raise CapUnavailable(f"cannot make a memory cgroup under {parent}: {exc}") from exc
    try:
        yield MemoryCap(folder, version, limit_mib)
    finally:
        try:
            folder.rmdir()  # its processes have exited; their page cache moves to the parent
        except OSError:
            pass


def _memory_parent() -> tuple[int, Path]:
    """(cgroup version, the folder of this process's memory cgroup)."""
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            folder = CGROUP_ROOT / "memory" / path.lstrip("/")
            if folder.is_dir():
                return 1, folder
    for line in lines:
        if line.startswith("0::"):
            base = CGROUP_ROOT / "unified" if (CGROUP_ROOT / "unified").is_dir() else CGROUP_ROOT
            folder = base / line[3:].lstrip("/")
            controllers = folder / "cgroup.controllers"
            if controllers.is_file() and "memory" in controllers.read_text().split():
                return 2, folder
    raise CapUnavailable("no memory cgroup controller is mounted for this process")


def run_capped(cmd: list[str], limit_mib: int, **kwargs) -> tuple[subprocess.CompletedProcess,
                                                                   dict]:
    """``subprocess.run(cmd)`` in a fresh cgroup of ``limit_mib``; returns the process and
    ``{"cap_mib", "cgroup_peak_mib", "oom_kills"}``."""
    with capped(limit_mib) as cap:
        proc = subprocess.run(cmd, **cap.popen_kwargs(), **kwargs)
        return proc, {"cap_mib": limit_mib, "cgroup_peak_mib": round(cap.peak_mib()),
                      "oom_kills": cap.oom_kills()}
