"""Store drift through the real ``kbsync`` command and the Prefect ingest flow (issue 10.3).

The collection folder of the embedded engine is removed, then a segment's id tracker is
truncated; each time ``kbsync verify`` exits 3, the next ``kbsync ingest`` repairs the
documents (``repaired``, a warning) and ``verify`` exits 0 again.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from kbtest import cli_env, run_kbsync, write_tree

KBSYNC = str(Path(sys.executable).with_name("kbsync"))

_env = cli_env
kbsync = run_kbsync


DOCS = {f"d{i}.md": f"# Doc {i}\n\nBody text number {i} about topic-{i}." for i in range(8)}


@pytest.mark.slow  # 30-75 s on 4 workers (docs/development.md, Tests)
def test_ingest_flow_repairs_and_verify_reports(prefect_api, tmp_path):
    home = tmp_path / "home"
    env = _env(prefect_api, home, KBSYNC_EMBED_PROVIDER="hash")
    share = tmp_path / "share"
    write_tree(share, DOCS)
    code, first, err = kbsync(env, "ingest", str(share), "--json")
    assert code == 0, err
    assert first["added"] == 8 and first["repaired"] == 0
    code, clean, err = kbsync(env, "verify", "--json")
    assert code == 0 and clean["drifted"] == 0, err

    shutil.rmtree(home / "qdrant" / "kbsync")
    code, found, err = kbsync(env, "verify", "--json")
    assert code == 3, err
    assert found["collection_missing"] and found["drifted"] == 8
    code, healed, err = kbsync(env, "ingest", str(share), "--json")
    assert code == 0, err
    assert (healed["repaired"], healed["updated"], healed["unchanged"]) == (8, 8, 0)
    assert any("store drift" in w for w in healed["warnings"])
    code, search, err = kbsync(env, "search", "topic-3", "--json")
    assert code == 0 and search["results"][0]["doc_id"] == "share/d3.md", err

    trackers = list((home / "qdrant" / "kbsync" / "segments").glob(
        "*/mutable_id_tracker.mappings"))
    assert trackers
    for tracker in trackers:
        os.truncate(tracker, tracker.stat().st_size // 4)
    code, found, err = kbsync(env, "verify", "--json")
    assert code == 3 and found["namespaces"]["default"]["drift"]["missing_points"], err
    lost = found["namespaces"]["default"]["drift"]["missing_points"]["documents"]
    code, healed, err = kbsync(env, "ingest", str(share), "--json")
    assert code == 0, err
    assert healed["repaired"] == lost and healed["unchanged"] == 8 - lost
    code, clean, err = kbsync(env, "verify", "--json")
    assert code == 0 and clean["remaining"] == 0, err
    assert Path(home / "qdrant" / "kbsync").is_dir()
