"""The rebuild's checks against the LIVE collection (issue 22, data loss), without Prefect:
real embedded engine, hash embeddings, the plain ingest runner.

- The state check refuses a shadow that lacks a root's live documents (its share was empty
  while the shadow was built), and one whose live roots changed meanwhile.
- The pre-build guard refuses an empty root, and a gate whose queries find no relevant
  document, or too few measurable ones; the decision compares the measurable queries only
  (issue 37); a lost pointer is refused and restored.
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
    # Fewer than 5 labelled: every one must measure (1 of 2 does not).
    with pytest.raises(UsageError, match="only 1 of the 2 queries .* at least 2"):
        checks.check_measurable(queries, {"team/y.md"}, namespace="team", collection="kbsync")
    assert checks.check_measurable(queries, {"team/x.md", "team/y.md"}, namespace="team",
                                   collection="kbsync") == [0, 1]


def test_a_gate_needs_a_minimum_of_measurable_queries():
    """Issue 37: 5 measurable queries at least (all of them when fewer are labelled); an
    unlabelled query never measures nor counts."""
    assert [checks.required_measurable(n) for n in (0, 1, 3, 5, 31)] == [1, 1, 3, 5, 5]
    queries = [EvalQuery(i + 1, f"q{i}", (f"team/d{i}.md",)) for i in range(31)]
    queries.append(EvalQuery(40, "unlabelled", ()))
    live = {f"team/d{i}.md" for i in range(4)}
    with pytest.raises(UsageError, match="only 4 of the 32 queries .* at least 5"):
        checks.check_measurable(queries, live, namespace="team", collection="kbsync")
    live.add("team/d30.md")
    assert checks.check_measurable(queries, live, namespace="team",
                                   collection="kbsync") == [0, 1, 2, 3, 30]


def _scored(ndcg: list, measurable: list[int]) -> dict:
    """An evaluation result as evaluate_collection makes it, one mode (dense)."""
    labelled = sum(v is not None for v in ndcg)
    mean = round(sum(v or 0.0 for v in ndcg) / labelled, 4)
    return {"queries": len(ndcg), "queries_hash": "h", "measurable": measurable,
            "ndcg_per_query": {"dense": ndcg},
            "modes": {"dense": {"ndcg@10": mean, "scored": labelled, "queries": len(ndcg)}}}


def test_the_decision_measures_the_same_queries_on_both_sides():
    """Issue 37: 2 of 31 queries measure; the diluted drop is 0.0210 < 0.03, on the two
    that measure it is 0.3250: refused; the shadow's own losses stay in the set."""
    state = {"matches": True, "pending_count": 0, "missing_count": 0}
    live = _scored([1.0, 0.65] + [0.0] * 29, [0, 1])
    shadow = _scored([0.5, 0.5] + [0.0] * 29, [0, 1])
    assert live["modes"]["dense"]["ndcg@10"] - shadow["modes"]["dense"]["ndcg@10"] < 0.03
    decision = rb.decide(live, shadow, max_drop=0.03, state=state)
    assert decision["modes"]["dense"] == {"live": 0.825, "shadow": 0.5, "delta": -0.325,
                                          "ok": False}
    assert decision["gate"] == {"queries": 31, "measured": 2, "left_out": 29, "minimum": 5}
    assert decision["reasons"][0].startswith("too few measurable queries: 2 of 31")
    # Enough measure: the same rule, and the shadow lacking a live document counts (0.0).
    live = _scored([1.0] * 6 + [0.0] * 25, list(range(6)))
    shadow = _scored([1.0] * 5 + [0.0] * 26, list(range(5)))
    decision = rb.decide(live, shadow, max_drop=0.03, state=state)
    assert decision["modes"]["dense"]["delta"] == round(5 / 6 - 1, 4) and not decision["swap"]
    assert decision["reasons"] == ["dense: nDCG@10 0.8333 on the shadow vs 1.0000 live "
                                   "(drop 0.1667 > max-drop 0.03)"]
    assert rb.decide(live, live, max_drop=0.03, state=state)["swap"]


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
