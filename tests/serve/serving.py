"""Helpers of the ``kbsync serve`` tests: a home with a few documents, a real server in a
subprocess (this worktree's code), and raw frames on its socket."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path

from kbtest import hash_env

ROOT = Path(__file__).resolve().parents[2]
DOCS = {"notes/volcano": "Volcano ash notes: the crater vents steam after rain.",
        "notes/glacier": "Glacier melt measurements from the northern valley.",
        "notes/harbour": "Harbour cranes are inspected every spring."}


def serve_env(home: Path, prefect_api: str | None = None, **extra: str) -> dict[str, str]:
    """A ``kbsync`` environment with hash embeddings that runs this worktree's code."""
    return hash_env(prefect_api, home, PYTHONPATH=str(ROOT), **extra)


AS_USER = """
import json, os, pwd, sys
import argparse, http.client, socket, struct, urllib.request, urllib.error, logging
import kbsync.app.cli as cli, kbsync.app.cli_serve, kbsync.app.cli_support, kbsync.app.console
import kbsync.serve.client, kbsync.query.search, kbsync.query.answer, kbsync.models
import kbsync.query.filters, kbsync.settings
user, argv = sys.argv[1], json.loads(sys.argv[2])
entry = pwd.getpwnam(user)
os.setgroups(os.getgrouplist(user, entry.pw_gid)); os.setgid(entry.pw_gid); os.setuid(entry.pw_uid)
sys.exit(cli.main(argv))
"""
"""``kbsync ARGV`` as ``user``: the CLI loaded as root, then the process becomes the user
(uid, gid, groups) before it connects. ``runuser -u USER -- kbsync`` cannot be used here:
the interpreter lives under /root (0700), which the test users cannot reach."""


def kbsync_as(env: dict[str, str], user: str, *args: str) -> subprocess.CompletedProcess:
    """``kbsync ARGS`` run as ``user`` (see :data:`AS_USER`)."""
    return subprocess.run([sys.executable, "-c", AS_USER, user, json.dumps(list(args))],
                          env=env, capture_output=True, text=True, timeout=120, cwd="/")


def kbsync(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``kbsync ARGS`` (this worktree's)."""
    argv = [sys.executable, "-m", "kbsync", *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout,
                          cwd="/")


def seed(env: dict[str, str], docs: dict[str, str] = DOCS, namespace: str = "default") -> None:
    """Store ``docs`` through the Python API (no Prefect: seconds)."""
    code = ("import json, sys\nfrom kbsync import api\n"
            "for doc_id, text in json.loads(sys.argv[1]).items():\n"
            f"    api.add_text(text, doc_id, namespace={namespace!r})\n")
    subprocess.run([sys.executable, "-c", code, json.dumps(docs)], env=env, check=True,
                   capture_output=True, timeout=120)


class Server:
    """``kbsync serve ARGS`` in a subprocess; :meth:`start` returns once it said it is ready
    (its own log line: the event itself, never a sleep)."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.env, self.args = env, args
        self.lines: "queue.Queue[str]" = queue.Queue()
        self.log: list[str] = []
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60) -> "Server":
        self.proc = subprocess.Popen([sys.executable, "-m", "kbsync", "serve", *self.args],
                                     env=self.env, stderr=subprocess.PIPE, text=True, cwd="/")
        threading.Thread(target=self._pump, daemon=True).start()
        self.wait_for("kbsync serve ready", timeout)
        return self

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line)
        self.lines.put("")  # EOF

    def wait_for(self, text: str, timeout: float = 60) -> str:
        """The first (further) stderr line containing ``text``; fails on EOF or timeout."""
        while True:
            line = self.lines.get(timeout=timeout)
            self.log.append(line)
            if text in line:
                return line
            if line == "":
                raise AssertionError(f"server exited before {text!r}:\n{''.join(self.log)}")

    def seen(self) -> str:
        """Every line so far (for a failure's message)."""
        while not self.lines.empty():
            self.log.append(self.lines.get_nowait())
        return "".join(self.log)

    def signal(self, signum: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    def stop(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def connect(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(60)
    sock.connect(str(path))
    return sock


def send_raw(sock: socket.socket, body: bytes) -> None:
    sock.sendall(struct.pack(">I", len(body)) + body)


def recv(sock: socket.socket) -> dict | None:
    header = _exact(sock, 4)
    if header is None:
        return None
    body = _exact(sock, struct.unpack(">I", header)[0])
    return None if body is None else json.loads(body)


def _exact(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def call(path: Path, op: str, args: dict) -> dict | None:
    with connect(path) as sock:
        send_raw(sock, json.dumps({"v": 1, "op": op, "args": args}).encode())
        return recv(sock)


def clean(data: dict) -> dict:
    """A result without its timings (they differ run to run)."""
    return {k: v for k, v in data.items() if not k.endswith("latency_ms")}


def chmod_tree_open(path: Path) -> None:
    """Let other users reach ``path`` (the socket's folder) for runuser tests."""
    os.chmod(path, 0o755)
