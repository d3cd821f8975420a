"""``kbsync ingest`` on a terminal shows files done of files planned as batches finish, and
``--json`` prints the same object as ever, with nothing drawn (issue 41).

The real command runs on a pseudo-terminal (its stderr, where the status line goes); the
test reads what the terminal receives until the command exits (no sleeps).
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time

import pytest

from kbsync.ingest.summary import IngestSummary
from kbtest import KBSYNC, hash_env, topic_share

FILES = 300
_LINE = re.compile(rb"ingesting (\d+)/(\d+)(\+?) files, ([\d,]+) chunks embedded")


def _run_on_tty(env: dict[str, str], *args: str, stdout=None) -> tuple[int, bytes]:
    """Run ``kbsync`` with stderr (and stdout, unless given) on a pseudo-terminal: its exit
    code and every byte the terminal received."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    proc = subprocess.Popen([KBSYNC, *args], env=env, stdin=slave, stderr=slave,
                            stdout=slave if stdout is None else stdout, start_new_session=True)
    os.close(slave)
    received = bytearray()
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], deadline - time.monotonic())
            if not ready:
                break
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the command closed the terminal (it exited)
                break
            if not chunk:
                break
            received += chunk
        return proc.wait(timeout=60), bytes(received)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


@pytest.mark.slow  # the session's Prefect server (10-30 s on 2 cores) and two real ingests
def test_the_progress_line_advances_on_a_terminal_and_json_is_unchanged(prefect_api, tmp_path):
    share = topic_share(tmp_path / "share", FILES)
    env = hash_env(prefect_api, tmp_path / "home", KBSYNC_FILES_PER_BATCH="10",
                   TERM="xterm-256color")
    for name in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "COLUMNS", "LINES"):
        env.pop(name, None)

    code, screen = _run_on_tty(env, "ingest", str(share))
    assert code == 0, screen.decode(errors="replace")[-2000:]
    seen = [(int(done), int(total)) for done, total, _, _ in _LINE.findall(screen)]
    assert len(set(seen)) >= 2, screen.decode(errors="replace")[-2000:]
    assert seen[-1] == (FILES, FILES)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert b"added" in screen  # the summary table follows, as before

    # --json: stdout is the one object, with the summary's keys; the terminal draws nothing.
    out = tmp_path / "out.json"
    with out.open("wb") as sink:
        code, screen = _run_on_tty(env, "ingest", str(share), "--force", "--json", stdout=sink)
    assert code == 0, screen.decode(errors="replace")[-2000:]
    data = json.loads(out.read_text())
    expected = IngestSummary(run_id="", namespace="default", collection="kbsync",
                             mode="incremental", dry_run=False).to_dict()
    assert set(data) == set(expected)
    assert data["updated"] == FILES and data["failed"] == 0
    assert b"ingesting" not in screen, screen.decode(errors="replace")[-2000:]
