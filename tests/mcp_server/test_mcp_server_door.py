"""The kernel is the oracle through ``kbsync mcp`` over a shared server (issue 40, "Done when").

A random tree of 40 files over 3 ``useradd`` users and 2 groups is ingested by its owner (root
here); the owner runs ``kbsync serve --socket PATH``; every user runs ``kbsync mcp`` as
themselves (``runuser``) with ``KBSYNC_SERVER=unix:PATH``, driven by the SDK's stdio client. The
doc_ids each user's ``search`` can return, and the documents ``namespaces`` counts for them,
equal the files the kernel lets that user read.

Uses issue 40's other door (``kbsync serve``, and ``kbsync.serve.client.connect_from_env``). The
in-process case needs no such test: the store is private (0700) to its owner, so the only reader
in process is the owner.
"""

from __future__ import annotations

import os
import signal
import site
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from kbtest import REPO, hash_env

sys.path.insert(0, str(REPO / "tests" / "perms"))
from perm_users import (kernel_readable, local_people, open_folder,  # noqa: E402
                        random_share, require_tools)

PYTHON = "/usr/bin/python3.11"
"""The venv's interpreter lives under /root (closed to other users); the system 3.11 runs this
tree with the venv's packages on PYTHONPATH, as tests/store/test_sec_shared_group.py does."""
SERVE_READY_S = 60


pytestmark = [
    pytest.mark.slow,  # users, an ingest, a server and one MCP server per user: ~30 s
    pytest.mark.skipif(not os.access(PYTHON, os.X_OK), reason=f"{PYTHON} not found"),
]


def _ingest(env: dict[str, str], share: Path) -> None:
    code = ("import sys\nfrom kbsync.ingest.discover import parse_root\n"
            "from kbsync.ingest.runner import run_plain\nfrom kbsync.runtime import Runtime\n"
            "from kbsync.settings import Settings\nrt = Runtime.open(Settings())\n"
            "try:\n    s = run_plain([parse_root(sys.argv[1])], runtime=rt)\n"
            "    assert s.failed == 0, s.failures\nfinally:\n    rt.close()\n")
    subprocess.run([sys.executable, "-c", code, f"share={share}"], env=env, cwd=REPO,
                   check=True, capture_output=True, timeout=300)


def _wait_for_server(address: str, proc: subprocess.Popen) -> None:
    """Until the server answers ``health`` (its client has no other readiness signal)."""
    from kbsync.serve.client import connect_from_env

    deadline = time.monotonic() + SERVE_READY_S
    while True:
        assert proc.poll() is None, f"kbsync serve exited {proc.returncode}"
        try:
            client = connect_from_env(env={"KBSYNC_SERVER": address})
            if client is not None and client.health():
                return
        except Exception:  # noqa: BLE001 - not listening yet
            if time.monotonic() > deadline:
                raise
        time.sleep(0.1)


def _reader_view(user: str, base: Path, address: str) -> tuple[set[str], int]:
    """(doc_ids ``search`` returns, documents ``namespaces`` counts) for ``user``'s own
    ``kbsync mcp``, run with ``runuser``."""
    own = base / f"home-{user}"
    own.mkdir(mode=0o700, exist_ok=True)
    os.chown(own, *_ids(user))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(own), "LANG": "C.UTF-8",
           "PYTHONPATH": os.pathsep.join([str(REPO), *site.getsitepackages()]),
           "KBSYNC_HOME": str(own / "kb"), "KBSYNC_SERVER": address,
           "KBSYNC_EMBED_PROVIDER": "hash", "HF_HUB_OFFLINE": "1"}
    params = StdioServerParameters(
        command="runuser", args=["-u", user, "--", "env", "-i",
                                 *(f"{k}={v}" for k, v in env.items()),
                                 PYTHON, "-s", "-m", "kbsync", "mcp"], cwd=str(REPO))

    async def main() -> tuple[set[str], int]:
        with anyio.fail_after(120), (base / f"mcp-{user}.log").open("w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    found: set[str] = set()
                    for leaf in ("m0", "m1", "m2", "m3"):  # 10 files each, under k
                        reply = await session.call_tool("search", {
                            "query": "volcano field notes", "mode": "dense", "k": 100,
                            "path_prefix": f"t0/{leaf}"})
                        if reply.is_error:  # a reader who can read nothing of it
                            assert reply.content[0].text.startswith("UsageError: unknown "
                                                                    "namespace"), reply.content
                            continue
                        found |= {h["doc_id"] for h in reply.structured_content["results"]}
                    listed = await session.call_tool("namespaces", {})
                    assert not listed.is_error, listed.content
                    counts = listed.structured_content["namespaces"]
                    return found, counts.get("default", {"documents": 0})["documents"]
    return anyio.run(main)


def _ids(user: str) -> tuple[int, int]:
    import pwd

    entry = pwd.getpwnam(user)
    return entry.pw_uid, entry.pw_gid


def test_every_readers_mcp_view_through_the_server_equals_the_kernels(tmp_path) -> None:
    require_tools()
    with local_people(3, 2, seed=40) as people, open_folder("kbsync-mcp-door") as base:
        root = base / "share"
        files = random_share(root, people, seed=40, tops=1, per_folder=5)
        env = hash_env(None, tmp_path / "owner-home", PYTHONPATH=str(REPO))
        _ingest(env, root)
        sock = base / "kbsync.sock"
        address = f"unix:{sock}"
        with (tmp_path / "serve.log").open("wb") as log:
            # every test user may connect; the kernel names each one
            serve = subprocess.Popen([sys.executable, "-m", "kbsync", "serve", "--socket",
                                      str(sock), "--socket-mode", "0666"],
                                     env=env, cwd=REPO, stdout=log, stderr=log)
        try:
            _wait_for_server(address, serve)
            for user in people.users:
                expected = {f"share/{p.relative_to(root).as_posix()}"
                            for p in kernel_readable(user, files)}
                found, documents = _reader_view(user, base, address)
                assert found == expected, user
                assert documents == len(expected), user
        finally:
            serve.send_signal(signal.SIGTERM)
            serve.wait(timeout=60)
