"""The kernel is the oracle, through the real ``kbsync`` command (issue 39): a random tree
of 240 files over 5 ``useradd`` users and 3 groups, ingested by the Prefect flow; for every
user, the doc_ids ``kbsync search --as-user USER`` can return equal the files ``runuser -u
USER -- test -r`` says they may read. Then only permissions change, one incremental run
makes the sets equal again with nothing converted or embedded, and a group change applies
with no run at all."""

from __future__ import annotations

import grp
import pwd
from pathlib import Path

import pytest

from kbtest import hash_env, run_kbsync
from perm_users import kernel_readable, local_people, open_folder, random_share, require_tools, run

TOPS = 3


def _cli_visible(env: dict, user: str) -> set[str]:
    """Every doc_id a search as ``user`` can return: one dense search per top folder (80
    files each, under k)."""
    found: set[str] = set()
    for top in range(TOPS):
        code, data, err = run_kbsync(env, "search", "volcano field notes", "--as-user", user,
                                     "--mode", "dense", "-k", "100", "--path-prefix", f"t{top}",
                                     "--json")
        assert code == 0, err
        found |= {hit["doc_id"] for hit in data["results"]}
    return found


def _expected(root: Path, user: str, files: list[Path]) -> set[str]:
    return {f"share/{p.relative_to(root).as_posix()}" for p in kernel_readable(user, files)}


@pytest.mark.slow  # ~1 minute: 2 ingests and ~35 CLI searches
def test_every_users_cli_view_equals_the_kernels_before_and_after_permission_changes(
        prefect_api, tmp_path) -> None:
    require_tools()
    with local_people(5, 3, seed=17) as people, open_folder("kbsync-perms-cli") as base:
        root = base / "share"
        files = random_share(root, people, seed=17)
        assert len(files) >= 200
        env = hash_env(prefect_api, tmp_path / "home")
        code, first, err = run_kbsync(env, "ingest", f"share={root}", "--json")
        assert code == 0, err
        assert first["added"] == len(files) and first["failed"] == 0
        for user in people.users:
            expected = _expected(root, user, files)
            assert _cli_visible(env, user) == expected, user
            code, stats, err = run_kbsync(env, "stats", "--as-user", user, "--json")
            assert code == 0, err
            assert stats["namespaces"].get("default", {"documents": 0})["documents"] \
                == len(expected)

        run("chmod", "0644", str(files[0]))
        run("chown", people.users[1], str(files[1]))
        run("setfacl", "-m", f"u:{people.users[2]}:r--,m::r--", str(files[2]))
        run("setfacl", "-x", f"u:{people.users[2]}", str(files[2]))
        run("setfacl", "-m", f"g:{people.groups[1]}:r--,m::r-x", str(files[3]))
        run("chmod", "0700", str(files[100].parent))
        run("chmod", "0711", str(files[200].parent.parent))
        code, second, err = run_kbsync(env, "ingest", f"share={root}", "--json")
        assert code == 0, err
        assert (second["added"], second["updated"], second["failed"]) == (0, 0, 0)
        assert second["chunks_raw"] == 0 and second["embeddings_computed"] == 0
        assert second["permissions_updated"] > 0
        for user in people.users:
            assert _cli_visible(env, user) == _expected(root, user, files), user

        user, group = _member_of_a_supplementary_group(people.users)
        run("gpasswd", "-d", user, group)
        assert _cli_visible(env, user) == _expected(root, user, files)  # no run in between

        code, _data, err = run_kbsync(env, "search", "volcano", "--as-user", "no-such-kb39")
        assert code == 2 and err.strip().count("\n") == 0 and "no such user" in err


def _member_of_a_supplementary_group(users: list[str]) -> tuple[str, str]:
    for user in users:
        primary = pwd.getpwnam(user).pw_gid
        for group in grp.getgrall():
            if user in group.gr_mem and group.gr_gid != primary:
                return user, group.gr_name
    pytest.skip("no user of this draw has a supplementary group")
