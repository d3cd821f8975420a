"""Issue 10.1's reproduction through the real ``kbsync`` command and the ingest flow.

A share of a few dozen files, one of them with a Latin-1 name (not valid UTF-8),
default conversion isolation: the run exits 0 with one JSON object on stdout,
every file is indexed, and the re-run finds them all unchanged. A root folder
named in Latin-1 is synced too (its path is a Prefect parameter).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

KBSYNC = str(Path(sys.executable).with_name("kbsync"))


def _kbsync(env, *args: str) -> tuple[int, str, str]:
    proc = subprocess.run([KBSYNC, *args], env=env, capture_output=True, text=True,
                          timeout=600)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.slow  # 30-75 s on 4 workers (docs/development.md, Tests)
def test_a_latin1_file_name_is_indexed_by_the_cli(prefect_api, tmp_path):
    share = tmp_path / "share"
    for i in range(40):
        folder = share / f"d{i % 8}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{i}.md").write_text(f"# Doc {i}\n\nBody of document {i}.\n",
                                         encoding="utf-8")
    with open(os.path.join(os.fsencode(share / "d5"), b"lat\xe9in1.md"), "w") as fh:
        fh.write("# x\nx\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KBSYNC_")}
    env.update(PREFECT_API_URL=prefect_api, KBSYNC_HOME=str(tmp_path / "home"),
               KBSYNC_EMBED_PROVIDER="hash", PREFECT_SERVER_ANALYTICS_ENABLED="false")

    code, out, err = _kbsync(env, "ingest", str(share), "--json")
    assert code == 0, err
    first = json.loads(out)  # exactly one JSON object on stdout
    assert (first["files_seen"], first["added"], first["failed"]) == (41, 41, 0), first
    assert first["failures"] == []

    code, out, err = _kbsync(env, "stats", "--json")
    assert code == 0, err
    assert json.loads(out)["namespaces"]["default"]["documents"] == 41

    code, out, err = _kbsync(env, "search", "x", "--mode", "dense", "-k", "1", "--json")
    assert code == 0, err
    hit = json.loads(out)["results"][0]
    assert hit["doc_id"] == "share/d5/lat\\xe9in1.md"
    assert hit["path"].endswith("/d5/lat\\xe9in1.md")

    code, out, err = _kbsync(env, "ingest", str(share), "--json")
    assert code == 0, err
    again = json.loads(out)
    assert (again["unchanged"], again["added"], again["updated"]) == (41, 0, 0)


    # A root folder named in Latin-1: its path travels through the flow's parameters.
    raw = os.path.join(os.fsencode(tmp_path), b"archiv\xe9")
    os.mkdir(raw)
    for name in (b"a.md", b"b\xff.md"):
        with open(os.path.join(raw, name), "w") as fh:
            fh.write(f"# {name!r}\n\nbody\n")
    code, out, err = _kbsync(env, "ingest", os.fsdecode(raw), "--json")
    assert code == 0, err
    latin_root = json.loads(out)
    assert (latin_root["roots"], latin_root["added"], latin_root["failed"]) == \
        (["archiv\\xe9"], 2, 0)
