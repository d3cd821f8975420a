"""A plan slice holds one file record, one state record and one plan item per file of the
slice (issue 23: a whole 100k-file root's plan was ~2 KB a file, 200 MB, before roots were
planned in slices, tests/ingest/test_plan_slices.py). These guard its size per file: the
records have no per-object ``__dict__``, and the values most state records share are one
string each."""

from __future__ import annotations

import json
import subprocess
import sys

from kbsync.ingest.classify import PlanItem
from kbsync.models import DocState, DocStatus, SourceFile

FILES = 2_000
PER_FILE_BOUND = 1_900
"""Bytes a file may cost (discovery + its record + its plan item). Measured 1,601 B with
pytest's temporary paths (1,478 with shorter ones); 2,003 B before slots and interning;
1,644 B with a permission profile per distinct permissions, 1,816 B with one per file grant
and folder (issue 39: a folder's chmod then rewrites profile records, not points), ~500 B a
profile, and this share is a worst case: 679 folders of 3 files each."""


def _share(tmp_path):
    share = tmp_path / "share"
    for i in range(FILES):
        folder = share / f"dept{i % 7}" / f"project-{i % 97:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"note-{i:05d}.md").write_text("x")
    return share


MEASURE = """
import json, sys, tracemalloc
from kbsync.ingest.classify import plan_files
from kbsync.ingest.discover import discover, parse_root
from kbsync.models import DocState, DocStatus

def stored_records(files):
    # the records as the store returns them: JSON payloads, decoded one by one
    return [json.dumps(DocState(
        doc_id=f.doc_id, namespace="default", root=f.root, path=str(f.path),
        content_hash="ab" * 32, fingerprint="f" * 64, chunk_count=3, status=DocStatus.OK,
        updated_at="2026-12-02T20:00:00.123456+00:00", run_id="r" * 36, size=f.size,
        mtime_ns=f.mtime_ns).to_payload()) for f in files]

root = parse_root(sys.argv[1])
tracemalloc.start()
before = tracemalloc.get_traced_memory()[0]
found = discover(root, accept=lambda path: True)
discovered = tracemalloc.get_traced_memory()[0]
payloads = stored_records(found.files)
loaded_from = tracemalloc.get_traced_memory()[0]
states = {s.doc_id: s for s in (DocState.from_payload(json.loads(p)) for p in payloads)}
plan = plan_files(found.files, states, fingerprint="f" * 64)
after = tracemalloc.get_traced_memory()[0]
tracemalloc.stop()
print(json.dumps({"items": len(plan.items), "hashed": plan.hashed,
                  "bytes": (discovered - before) + (after - loaded_from)}))
"""
"""Run in a fresh interpreter: what earlier tests left behind (a grown table of interned
strings resizing inside the window) must not count against the plan (it added ~1 KB a file
when another ingest test had run first in the same process)."""


def test_a_plan_costs_under_the_bound_per_file(tmp_path):
    share = _share(tmp_path)
    done = subprocess.run([sys.executable, "-c", MEASURE, str(share)], capture_output=True,
                          text=True, timeout=120, check=True)
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    assert measured["items"] == FILES and measured["hashed"] == 0  # all unchanged: stat check
    per_file = measured["bytes"] / FILES
    assert per_file < PER_FILE_BOUND, f"{per_file:.0f} B a file"


def test_records_have_no_instance_dict():
    for cls in (SourceFile, DocState, PlanItem):
        assert "__slots__" in vars(cls), cls
        assert "__dict__" not in cls.__slots__


def test_loaded_records_share_their_common_values():
    payload = DocState(doc_id="r/a.md", namespace="team-a", root="r", path="/s/a.md",
                       content_hash="h", fingerprint="fp-" + "0" * 40, chunk_count=1,
                       status=DocStatus.OK, updated_at="t", run_id="run-" + "1" * 32, size=1,
                       mtime_ns=1).to_payload()
    one, two = (DocState.from_payload(json.loads(json.dumps(payload))) for _ in range(2))
    for name in ("namespace", "root", "fingerprint", "run_id"):
        assert getattr(one, name) is getattr(two, name), name
    assert one == two
