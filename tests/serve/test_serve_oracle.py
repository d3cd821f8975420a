"""The kernel is the oracle through every door of ``kbsync serve`` (issue 40): a random share
over ``useradd`` users and groups, ingested by the Prefect flow, then for every user the
doc_ids reachable through the Unix socket (the CLI run as that user: ``SO_PEERCRED`` names
them) and through HTTP (with that user's token) equal the files the kernel lets them read."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "perms"))  # the kernel's helpers
from perm_users import (kernel_readable, local_people, open_folder, random_share,  # noqa: E402
                        require_tools)
from serving import Server, kbsync, kbsync_as, serve_env  # noqa: E402

from kbsync.app.cli_serve import hash_token  # noqa: E402
from kbsync.serve.client import connect_from_env  # noqa: E402

TOPS = 3


def _query(top: int) -> list[str]:
    return ["search", "volcano field notes", "--mode", "dense", "-k", "100",
            "--path-prefix", f"t{top}", "--json"]


@pytest.mark.slow  # ~1 minute: an ingest and ~30 searches per door
def test_every_users_view_through_the_socket_and_http_equals_the_kernels(prefect_api,
                                                                         tmp_path) -> None:
    require_tools()
    with local_people(4, 3, seed=23) as people, open_folder("kbsync-serve") as base:
        root = base / "share"
        files = random_share(root, people, seed=23)
        env = serve_env(tmp_path / "home", prefect_api)
        done = kbsync(env, "ingest", f"share={root}", "--json", timeout=600)
        assert done.returncode == 0, done.stderr
        sock = base / "kb.sock"
        tokens = tmp_path / "tokens"
        tokens.write_text("".join(f"{u} {hash_token('tok-' + u)}\n" for u in people.users))
        os.chmod(tokens, 0o600)
        port = _free_port()
        with Server(env, "--socket", str(sock), "--socket-mode", "0666",
                    "--http", f"127.0.0.1:{port}", "--tokens", str(tokens)):
            remote = {**env, "KBSYNC_SERVER": f"unix:{sock}"}
            for user in people.users:
                expected = {f"share/{p.relative_to(root).as_posix()}"
                            for p in kernel_readable(user, files)}
                by_socket: set[str] = set()
                for top in range(TOPS):
                    done = kbsync_as(remote, user, *_query(top))
                    assert done.returncode == 0, done.stderr
                    by_socket |= {h["doc_id"] for h in json.loads(done.stdout)["results"]}
                assert by_socket == expected, user
                client = connect_from_env({"KBSYNC_SERVER": f"http://127.0.0.1:{port}",
                                           "KBSYNC_TOKEN": f"tok-{user}"})
                by_http: set[str] = set()
                for top in range(TOPS):
                    data = client.search({"query": "volcano field notes", "mode": "dense",
                                          "k": 100, "path_prefix": f"t{top}"})
                    by_http |= {h["doc_id"] for h in data["results"]}
                assert by_http == expected, user
                stats = client.stats({})
                assert stats["namespaces"].get("default", {"documents": 0})["documents"] \
                    == len(expected)
            os.chmod(sock, 0o600)  # the socket's mode decides who may connect at all
            denied = kbsync_as(remote, people.users[0], *_query(0))
            assert denied.returncode == 1 and denied.stderr.count("\n") == 1
            assert "Permission denied" in denied.stderr


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
