"""``kbsync ingest`` without a Prefect API runs the runner in process (issue 42).

Before, it started Prefect's temporary server (13-23 s of a 300-page no-op that takes about
1 s without it). Now: no Prefect import, no server, nothing written under ``PREFECT_HOME``;
the same JSON summary, exit codes and one-line errors as a flow run
(tests/flows/test_cli_e2e.py runs the CLI against a Prefect API).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from kbtest import hash_env, write_tree

from kbsync.app.cli_ingest import prefect_api_configured

PROBE = ("import sys, json; from kbsync.app.cli import main; code = main(sys.argv[1:]); "
         "print(json.dumps({'prefect': 'prefect' in sys.modules, 'idle': sorted("
         "m for m in ('numpy', 'rich') if m in sys.modules)}), file=sys.stderr); "
         "sys.exit(code)")
"""``idle``: which of numpy (vectors) and rich (a person's tables) the run imported: a run
with nothing to write and ``--json`` needs neither (they cost it about 40 ms)."""


def _ingest(env, *args: str) -> tuple[int, dict, str, dict[str, Any]]:
    proc = subprocess.run([sys.executable, "-c", PROBE, "ingest", *args, "--json"], env=env,
                          capture_output=True, text=True, timeout=300)
    *lines, probe = proc.stderr.strip().splitlines()
    return proc.returncode, json.loads(proc.stdout), "\n".join(lines), \
        json.loads(probe)


def test_an_ingest_without_an_api_runs_in_process_and_records_nothing_in_prefect(tmp_path):
    share = tmp_path / "share"
    write_tree(share, {"a.md": "# A\n\nalpha text", "b/c.md": "# C\n\ngamma text"})
    prefect_home = tmp_path / "prefect"
    env = hash_env(None, tmp_path / "home", drop=("KBSYNC_", "PREFECT_"),
                   PREFECT_HOME=str(prefect_home))
    code, first, err, probe = _ingest(env, str(share))
    assert code == 0, err
    assert (first["added"], first["failed"], first["roots"]) == (2, 0, ["share"])
    assert not probe["prefect"], "Prefect was imported"
    code, again, err, probe = _ingest(env, str(share))
    assert code == 0 and not probe["prefect"], err
    assert (again["unchanged"], again["added"], again["files_seen"]) == (2, 0, 2)
    # That run kept the root's totals (a meta record: its vector check imports numpy); the
    # next has nothing at all to write.
    code, _, err, probe = _ingest(env, str(share))
    assert code == 0 and probe["idle"] == [], err  # no numpy, no rich
    assert not (prefect_home / "prefect.db").exists()  # no temporary server, no run history
    (share / "bad.pdf").write_bytes(b"%PDF-1.4 not really")
    code, third, err, _ = _ingest(env, str(share))
    assert code == 3 and third["failed"] == 1  # some files failed: as a flow run's exit
    assert "failed share/bad.pdf" in err  # the flow's WARNING line, on stderr


def test_a_refusal_without_an_api_is_one_line_with_the_counts(tmp_path):
    share = tmp_path / "share"
    write_tree(share, {"a.md": "# A\n\nalpha text"})
    env = hash_env(None, tmp_path / "home", drop=("KBSYNC_", "PREFECT_"),
                   PREFECT_HOME=str(tmp_path / "prefect"))
    assert _ingest(env, str(share))[0] == 0
    (share / "a.md").unlink()
    write_tree(share, {"b.md": "# B\n\nbeta"})
    code, data, err, _ = _ingest(env, str(share), "--mode", "full")
    assert code == 1 and data["error"]["kind"] == "MassDeleteRefused", err
    assert err.count("MassDeleteRefused") == 1 and "Traceback" not in err


def test_the_api_is_read_from_the_environment_or_the_active_profile(tmp_path, monkeypatch):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.delenv("PREFECT_PROFILE", raising=False)
    monkeypatch.delenv("PREFECT_PROFILES_PATH", raising=False)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path))
    assert not prefect_api_configured()  # no profiles file
    (tmp_path / "profiles.toml").write_text(
        'active = "local"\n[profiles.local]\nPREFECT_API_URL = "http://127.0.0.1:4200/api"\n'
        '[profiles.other]\n')
    assert prefect_api_configured()
    monkeypatch.setenv("PREFECT_PROFILE", "other")
    assert not prefect_api_configured()
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    assert prefect_api_configured()
