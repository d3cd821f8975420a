"""Issue 22: names that collide with kbsync's own, a half-done removal, add_text over a root.

- ``KBSYNC_COLLECTION=kbsync_state kbsync remove --namespace default --yes`` deleted every
  state record of the real ``kbsync`` collection: internal names are refused as settings.
- ``kbsync verify --repair`` on a store left half-removed by a killed ``kbsync remove``
  rebuilt the removed root from its files: the removal now records its intent first, and
  repair (or the next ingest) finishes it. The kill is a real SIGKILL of the removing
  process, sent by itself right after the points are gone (the removal's first half).
- ``kbsync.api.add_text`` under a doc_id a root owns replaced the file's document.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from kbtest import KBSYNC, hash_env, write_tree
from kbsync import api
from kbsync.runtime import Runtime
from kbsync.settings import SettingsInvalid
from kbsync.errors import RootConflict
from kbsync.ingest.discover import parse_root
from kbsync.catalog.identity import ROOT_BINDING
from kbsync.ingest.runner import run_plain
from kbsync.settings import Settings
from kbsync.store.base import Filter


@pytest.fixture
def shares(tmp_path):
    """Roots ``a`` (4 files) and ``b`` (3 files)."""
    a, b = tmp_path / "a", tmp_path / "b"
    write_tree(a, {f"a{i}.md": f"# A {i}\n\nAlpha note number {i}." for i in range(4)})
    write_tree(b, {f"b{i}.md": f"# B {i}\n\nBravo note number {i}." for i in range(3)})
    return a, b


OUTER = ("KBSYNC_", "PREFECT_API_URL")
"""The outer shell's settings and Prefect API stay out of a run here."""


def _kbsync(env, *args: str) -> tuple[int, dict | None, str, str]:
    proc = subprocess.run([KBSYNC, *args], env=env, capture_output=True, text=True, timeout=300)
    data = json.loads(proc.stdout) if "--json" in args and proc.stdout.strip() else None
    return proc.returncode, data, proc.stdout, proc.stderr


def _ingest(settings, *roots) -> None:
    runtime = Runtime.open(settings)
    try:
        run_plain([parse_root(str(r)) for r in roots], runtime=runtime)
    finally:
        runtime.close()


def _contents(settings) -> dict:
    """Per root: documents recorded, chunk points; and the bound root names."""
    runtime = Runtime.open(settings)
    try:
        points: dict[str, int] = {}
        for p in runtime.store.scroll(runtime.collection, Filter.where(namespace="default")):
            points[p.payload["root"]] = points.get(p.payload["root"], 0) + 1
        records: dict[str, int] = {}
        for state in runtime.states.load("default").values():
            records[state.root] = records.get(state.root, 0) + 1
        bound = {b["root"] for b in runtime.states.read_meta(ROOT_BINDING,
                                                            bound_namespace="default")}
        return {"records": records, "points": points, "bound": bound}
    finally:
        runtime.close()


# -- a killed `kbsync remove` ------------------------------------------------------------------
_KILLED_REMOVE = """
import os, signal, sys
from kbsync.runtime import Runtime
from kbsync.ingest.remove import Target, remove
from kbsync.settings import Settings

settings = Settings()
runtime = Runtime.open(settings)
real = runtime.store


class DiesAfterThePoints:
    # kill -9 at the first deletion in the state collection: the points are gone already
    def __getattr__(self, name):
        return getattr(real, name)

    def delete(self, collection, flt):
        if collection == settings.state_collection:
            os.kill(os.getpid(), signal.SIGKILL)
        return real.delete(collection, flt)


remove(DiesAfterThePoints(), collection=settings.collection,
       state_collection=settings.state_collection,
       target=Target("default", sys.argv[1] if len(sys.argv) > 1 else None))
"""


def _kill_a_remove(settings, *root: str) -> None:
    """SIGKILL ``remove`` of root ``b`` (or, with no root, of namespace default) half way."""
    proc = subprocess.run([sys.executable, "-c", _KILLED_REMOVE, *root], env=hash_env(None, settings.home, drop=OUTER),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    half = _contents(settings)
    assert half["records"] == {"a": 4, "b": 3}, half
    assert set(half["points"]) == ({"a"} if root else set()), half


def _kill_a_remove_of_b(settings) -> None:
    _kill_a_remove(settings, "b")


def test_repair_finishes_a_killed_remove_instead_of_rebuilding_it(settings, shares):
    _ingest(settings, *shares)
    whole = _contents(settings)
    assert whole["records"] == {"a": 4, "b": 3} and whole["bound"] == {"a", "b"}
    _kill_a_remove_of_b(settings)
    env = hash_env(None, settings.home, drop=OUTER)

    code, found, _, err = _kbsync(env, "verify", "--json")
    assert code == 3, err
    assert found["pending_removals"] == [{"namespace": "default", "root": "b"}]
    code, _, text, err = _kbsync(env, "verify")
    assert code == 3 and "interrupted removal: root b of namespace default" in text, text + err

    code, repaired, _, err = _kbsync(env, "verify", "--repair", "--json")
    assert code == 0, err
    [done] = repaired["removals_finished"]
    assert (done["root"], done["namespace"], done["documents"], done["chunks"]) \
        == ("b", "default", 3, 0)
    assert repaired["drifted"] == 0 and (repaired["repair"] or {}).get("reprocessed", 0) == 0
    after = _contents(settings)
    assert after == {"records": {"a": 4}, "points": {"a": whole["points"]["a"]}, "bound": {"a"}}
    code, clean, _, err = _kbsync(env, "verify", "--json")
    assert code == 0 and clean["pending_removals"] == [] and clean["remaining"] == 0, err


def test_the_next_ingest_finishes_a_killed_remove(settings, shares):
    a, _ = shares
    _ingest(settings, *shares)
    _kill_a_remove_of_b(settings)
    runtime = Runtime.open(settings)
    try:
        dry = run_plain([parse_root(str(a))], runtime=runtime, dry_run=True).to_dict()
        assert any("interrupted `kbsync remove`" in w for w in dry["warnings"])
        summary = run_plain([parse_root(str(a))], runtime=runtime).to_dict()
        assert summary["unchanged"] == 4
        assert any("interrupted `kbsync remove` of root 'b'" in w for w in summary["warnings"])
    finally:
        runtime.close()
    assert _contents(settings)["records"] == {"a": 4}
    assert _contents(settings)["bound"] == {"a"}


def test_repair_finishes_a_killed_remove_of_a_namespace(settings, shares):
    _ingest(settings, *shares)
    _kill_a_remove(settings)
    env = hash_env(None, settings.home, drop=OUTER)
    code, found, _, err = _kbsync(env, "verify", "--json")
    assert code == 3 and found["pending_removals"] == [{"namespace": "default", "root": None}]
    code, repaired, text, err = _kbsync(env, "verify", "--repair")
    assert code == 0 and "finished the interrupted removal of namespace default: 7 documents" \
        in text, text + err
    assert _contents(settings) == {"records": {}, "points": {}, "bound": set()}


def test_a_finished_remove_leaves_no_intent(settings, shares):
    _ingest(settings, *shares)
    code, out, _, err = _kbsync(hash_env(None, settings.home, drop=OUTER), "remove", "--root", "b", "--yes", "--json")
    assert code == 0 and out["documents"] == 3, err
    code, clean, _, err = _kbsync(hash_env(None, settings.home, drop=OUTER), "verify", "--json")
    assert code == 0 and clean["pending_removals"] == [], err


# -- collection names of kbsync's own ------------------------------------------------------------
@pytest.mark.parametrize("name", ["kbsync_state", "kbsync__r1", "kbsync__r12_state",
                                  "kbsync__active", "kbsync__previous", "docs_state"])
def test_internal_collection_names_are_refused(name):
    with pytest.raises(SettingsInvalid, match="for its own use"):
        Settings(collection=name)


@pytest.mark.parametrize("name", ["kbsync", "docs", "my_stateful", "team__docs", "r1", "x__rx"])
def test_ordinary_collection_names_are_kept(name):
    assert Settings(collection=name).collection == name


def test_remove_under_the_state_collections_name_deletes_nothing(settings, shares):
    _ingest(settings, *shares)
    before = _contents(settings)
    for name in ("kbsync_state", "kbsync__r1"):
        code, out, text, err = _kbsync(hash_env(None, settings.home, drop=OUTER, KBSYNC_COLLECTION=name),
                                       "remove", "--namespace", "default", "--yes", "--json")
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 2 and len(lines) == 1, err
        assert "KBSYNC_COLLECTION" in lines[0] and name in lines[0] and "Traceback" not in err
    assert _contents(settings) == before


# -- add_text under a doc_id a root owns ----------------------------------------------------------
def test_add_text_under_a_root_owned_doc_id_is_refused(settings, shares):
    a, _ = shares
    with api.KnowledgeBase(settings) as kb:
        runtime = kb._open(embed=True)
        run_plain([parse_root(str(a))], runtime=runtime)
        before = runtime.states.get("default", "a/a0.md")
        for doc_id in ("a/a0.md", "a/new.md"):  # a file's document; under the bound NAME
            with pytest.raises(RootConflict) as err:
                kb.add_text("# Spoof\n\nNot the file.", doc_id)
            message = str(err.value)
            assert "\n" not in message and "root a" in message and doc_id in message
        assert runtime.states.get("default", "a/a0.md") == before
        assert kb.add_text("# Mine\n\nA note of my own.", "notes/mine").status == "added"
        assert run_plain([parse_root(str(a))], runtime=runtime).to_dict()["unchanged"] == 4


def test_a_new_root_over_stored_texts_is_refused(settings, tmp_path):
    notes = tmp_path / "notes"
    write_tree(notes, {"mine.md": "# Mine\n\nThe share's file."})
    with api.KnowledgeBase(settings) as kb:
        kb.add_text("# Mine\n\nA text of my own.", "notes/mine.md")
        runtime = kb._open(embed=True)
        with pytest.raises(RootConflict, match="kbsync.api") as err:
            run_plain([parse_root(str(notes))], runtime=runtime)
        assert "\n" not in str(err.value) and f"notes2={notes}" in str(err.value)
        assert runtime.states.get("default", "notes/mine.md").root == api.API_ROOT
        assert run_plain([parse_root(f"share={notes}")], runtime=runtime).to_dict()["added"] == 1
