"""Upgrades do not strand a store: with no model configured a collection keeps its own (issue 24).

The previous release's default local model was torch ``all-MiniLM-L6-v2``; this one's is
``all-MiniLM-L6-v2-int8``. A store the previous default built is opened here with every
default (``KBSYNC_EMBED_MODEL`` unset) by the real ``kbsync`` command and the Python API,
in their own processes: it answers and takes writes with the model it records. An
explicit different ``KBSYNC_EMBED_MODEL`` is still refused with ``EmbedderMismatch``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kbtest import cli_env

ROOT = Path(__file__).resolve().parents[2]
KBSYNC = str(Path(sys.executable).with_name("kbsync"))

_ADD = """
import json, sys
from kbsync import api
from kbsync.catalog.identity import stored_embedder
from kbsync.catalog.state import StateStore
from kbsync.settings import Settings
for doc_id, text in json.loads(sys.stdin.read()).items():
    result = api.add_text(text, doc_id, namespace="notes")
kb = api.KnowledgeBase()
print(json.dumps({"status": result.status, "model": kb.settings.embed_model_name(),
                  "stored": api.stats().embedding["model"]}))
"""


def _add(env: dict, docs: dict[str, str]) -> dict:
    done = subprocess.run([sys.executable, "-c", _ADD], input=json.dumps(docs), env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _search(env: dict, query: str) -> tuple[int, dict | None, str]:
    done = subprocess.run([KBSYNC, "search", query, "--namespace", "notes", "--json"], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    out = json.loads(done.stdout) if done.stdout.strip() else None
    return done.returncode, out, done.stderr


@pytest.mark.slow
def test_a_store_of_the_previous_default_answers_with_every_default(tmp_path) -> None:
    home = tmp_path / "home"
    previous = cli_env(None, home, KBSYNC_EMBED_MODEL="all-MiniLM-L6-v2")  # the previous release's default
    built = _add(previous, {"keys": "Tessera signing keys rotate every 90 days.",
                            "backup": "Backups run nightly and are kept for a month."})
    assert built["stored"] == "all-MiniLM-L6-v2"

    code, out, err = _search(cli_env(None, home), "how often do keys rotate")  # every default
    assert code == 0, err
    assert out["results"][0]["doc_id"] == "keys", out
    assert "EmbedderMismatch" not in err

    added = _add(cli_env(None, home), {"vpn": "The VPN gateway restarts on Sundays."})
    assert added == {"status": "added", "model": "all-MiniLM-L6-v2", "stored": "all-MiniLM-L6-v2"}
    code, out, err = _search(cli_env(None, home), "when does the VPN restart")
    assert code == 0 and out["results"][0]["doc_id"] == "vpn", (out, err)

    explicit = cli_env(None, home, KBSYNC_EMBED_MODEL="all-MiniLM-L6-v2-int8")
    code, out, err = _search(explicit, "how often do keys rotate")
    assert code == 2 and "EmbedderMismatch" in json.dumps(out) + err, (out, err)
    assert "local/all-MiniLM-L6-v2 (384" in err and "all-MiniLM-L6-v2-int8" in err


def test_the_record_kind_read_is_the_one_identity_writes() -> None:
    from kbsync.catalog import identity, model_keep

    assert model_keep.EMBEDDER_RECORD == identity.EMBEDDER
