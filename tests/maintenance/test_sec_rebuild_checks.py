"""The rebuild's checks against the LIVE collection (issue 22, data loss), without Prefect:
real embedded engine, hash embeddings, the plain ingest runner.

- The state check refuses a shadow that lacks a root's live documents (its share was empty
  while the shadow was built), and one whose live roots changed meanwhile.
- The pre-build guard refuses an empty root, and a gate whose queries find no relevant
  document; a lost pointer is refused and restored.
"""

from __future__ import annotations

import pytest

from kbsync.errors import MassDeleteRefused, StoreError, UsageError
from kbsync.maintenance import rebuild as rb
from kbsync.maintenance import rebuild_checks as checks
from kbsync.eval.queries import EvalQuery
from kbsync.catalog import active
from kbsync.ingest.discover import parse_root
from kbsync.ingest.remove import Target, remove
from kbsync.ingest.runner import run_plain
from kbsync.models import SyncMode
from kbsync.store import active as pointer
from kbtest import shadow_runtime, write_tree


def _two_roots(runtime, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for share, word in ((a, "alpha"), (b, "beta")):
        write_tree(share, {f"d{i}.md": f"# {word} {i}\n\nText {word} {i}." for i in range(5)})
    roots = [parse_root(f"a={a}"), parse_root(f"b={b}")]
    assert run_plain(roots, runtime=runtime).added == 10
    plan = rb.RebuildPlan(logical="kbsync", live="kbsync", shadow="kbsync__r1", previous=None,
                          roots={"default": [f"a={a}", f"b={b}"]}, live_build={},
                          target_build={})
    return a, b, roots, plan


def test_the_state_check_refuses_a_shadow_built_while_a_root_was_empty(runtime, tmp_path):
    a, b, roots, plan = _two_roots(runtime, tmp_path)
    kept = {p: p.read_text() for p in b.glob("*.md")}
    for path in kept:
        path.unlink()  # unmounted while the shadow is built
    shadow = shadow_runtime(runtime)
    assert run_plain(roots, runtime=shadow, mode=SyncMode.FULL).added == 5
    check = rb.state_check(plan, shadow, runtime)
    assert not check["matches"], check
    assert check["mass_delete"] == ["default:b (5 of 5 live documents)"]
    decision = rb.decide({"modes": {}}, {"modes": {}}, max_drop=0.02, state=check)
    assert not decision["swap"]
    assert "the shadow lacks most live documents of default:b" in decision["reasons"][0]

    # One file really deleted is what full mode drops: not a mass deletion.
    for path, text in kept.items():
        path.write_text(text)
    (b / "d0.md").unlink()
    assert run_plain(roots, runtime=shadow, mode=SyncMode.FULL).added == 4
    check = rb.state_check(plan, shadow, runtime)
    assert check["matches"] and check["mass_delete"] == [], check


def test_the_state_check_refuses_when_the_live_roots_changed(runtime, tmp_path):
    a, b, roots, plan = _two_roots(runtime, tmp_path)
    shadow = shadow_runtime(runtime)
    run_plain(roots, runtime=shadow, mode=SyncMode.FULL)
    assert rb.state_check(plan, shadow, runtime)["matches"]
    remove(runtime.store, collection="kbsync", state_collection="kbsync_state",
           target=Target("default", "b"))
    check = rb.state_check(plan, shadow, runtime)
    assert not check["matches"] and check["roots_changed"], check


def test_the_guard_refuses_an_empty_root_before_anything_is_built(runtime, tmp_path):
    a, b, roots, plan = _two_roots(runtime, tmp_path)
    checks.guard_roots(plan, runtime)  # both shares there: nothing to say
    for path in b.glob("*.md"):
        path.unlink()
    with pytest.raises(MassDeleteRefused) as refused:
        checks.guard_roots(plan, runtime)
    line = str(refused.value)
    assert "root b" in line and "holds no files" in line and "nothing was built" in line
    assert "--allow-mass-delete NAME=PATH" in line and "\n" not in line


def test_a_gate_that_cannot_measure_is_refused():
    queries = [EvalQuery(1, "q", ("team/x.md",)), EvalQuery(2, "r", ("team/y.md",))]
    with pytest.raises(UsageError, match="none of the 2 queries' 2 relevant documents"):
        checks.check_measurable(queries, {"share/a.md"}, namespace="default",
                                collection="kbsync")
    checks.check_measurable(queries, {"team/y.md"}, namespace="team", collection="kbsync")


def test_a_lost_pointer_is_refused_until_restored(runtime, tmp_path):
    settings = runtime.settings
    a, b, roots, plan = _two_roots(runtime, tmp_path)
    shadow = shadow_runtime(runtime)
    run_plain(roots, runtime=shadow, mode=SyncMode.FULL)
    active.write_build(runtime.store, "kbsync__r1", {"chunk_tokens": 64}, run_id="t")
    # A leftover shadow beside a live logical collection is served as before.
    assert active.resolve(settings, runtime.store).collection == "kbsync"
    assert active.unserved_collections(settings, runtime.store) == ["kbsync__r1"]  # verify names it
    rb.discard(runtime.store, "kbsync")  # the second swap dropped it; then the pointer is lost
    with pytest.raises(StoreError) as refused:
        active.resolve(settings, runtime.store)
    assert "kbsync rebuild --restore kbsync__r1" in str(refused.value)
    record = rb.restore(settings, "kbsync__r1", runtime.store)
    assert (record["active"], record["previous"], record["build"]) == (
        "kbsync__r1", None, {"chunk_tokens": 64})
    assert pointer.read_pointer(settings.home, "kbsync").active == "kbsync__r1"
    assert active.resolve(settings, runtime.store).collection == "kbsync__r1"
    assert active.unserved_collections(settings, runtime.store) == []
    with pytest.raises(UsageError, match="no such collection"):
        rb.restore(settings, "kbsync__r7", runtime.store)
