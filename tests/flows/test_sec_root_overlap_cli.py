"""Issue 22 through the real ``kbsync ingest`` and the ingest flow: a root overlapping a root
bound in an earlier run (a subfolder, a symlink to the same folder) and a root inside
KBSYNC_HOME are refused in one line, and ``--rebind`` makes the new root replace the old one."""

from __future__ import annotations

import pytest

from kbtest import cli_env, run_kbsync, write_tree


def _one_line_error(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("kbsync: error:")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.slow  # 30-75 s on 4 workers (docs/development.md, Tests)
def test_overlapping_roots_across_runs_through_the_cli(prefect_api, tmp_path):
    home = tmp_path / "home"
    env = cli_env(prefect_api, home, KBSYNC_EMBED_PROVIDER="hash",
                  KBSYNC_CONVERT_ISOLATION="false")
    share = tmp_path / "my docs"
    write_tree(share, {"top.md": "# Top\n\nTop note.", "d1/one.md": "# One\n\nFirst note.",
                       "d1/two.md": "# Two\n\nSecond note."})
    (tmp_path / "link").symlink_to(share, target_is_directory=True)
    code, first, err = run_kbsync(env, "ingest", str(tmp_path / "link"), "--json")
    assert code == 0 and first["added"] == 3, err

    for root in (str(share / "d1"), f"link={share}"):
        code, out, err = run_kbsync(env, "ingest", root, "--json")
        line = _one_line_error(err)
        assert code == 2 and out["error"]["kind"] == "RootConflict", err
        assert "my docs" in line and "--rebind" in line and "overlaps" in line

    (home / "qdrant").mkdir(parents=True, exist_ok=True)
    code, out, err = run_kbsync(env, "ingest", str(home / "qdrant"), "--json")
    assert code == 2 and "inside KBSYNC_HOME" in _one_line_error(err)

    code, moved, err = run_kbsync(env, "ingest", f"d1={share / 'd1'}", "--rebind", "--json")
    assert code == 0 and moved["added"] == 2, err
    code, stats, err = run_kbsync(env, "stats", "--json")
    assert code == 0 and stats["namespaces"]["default"]["documents"] == 2, err
