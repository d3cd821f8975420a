"""Each ingest task's ``.fn``: the step it wraps, with the process's runtime looked up
from the settings (no Prefect run needed), and every step has its task."""

from __future__ import annotations

import pytest
from kbsync.settings import SecretStr

from kbtest import write_tree
from kbsync.ingest import steps
from kbsync.ingest.discover import parse_root
from kbsync.ingest.plan import DeleteGuard
from kbsync.ingest.stages import StageResult
from kbsync.models import SyncMode
from tasks import ingest_tasks as t
from tasks.resources import release, runtime_for


@pytest.fixture
def share_settings(settings, tmp_path):
    share = tmp_path / "share"
    write_tree(share, {"a.md": "# A\n\nalpha text", "b.md": "# B\n\nbeta text"})
    yield parse_root(str(share)), settings
    release(settings)


def test_every_step_has_its_task_and_retries_only_idempotent_ones() -> None:
    wrapped = {steps.check_identity, steps.preflight, steps.record_identity,
               steps.check_collection, steps.seal_store, steps.plan, steps.batch, steps.heal,
               steps.finish_root,
               steps.prepare, steps.write}
    assert set(t.TASK_OF) == wrapped
    for step, task in t.TASK_OF.items():
        assert (task.retries > 0) == (step in steps.RETRIED), task.name
        assert not task.tags, "a tagged task run costs a concurrency-slot call per run"


def test_the_tasks_fns_run_a_root_end_to_end(share_settings) -> None:
    root, settings = share_settings
    bound = t.check_identity.fn(settings, [root], "default", False)
    assert t.preflight.fn(settings, root, "default", [], [], DeleteGuard()) == 0
    t.record_identity.fn(settings, bound, "run-1")
    assert t.check_collection.fn(settings, "default", True) is None
    rp = t.plan.fn(settings, root, "default", SyncMode.FULL, False, [], [], DeleteGuard())
    items = rp.to_process()
    results = t.batch.fn(settings, runtime_for(settings).chunk_config, items, "default", "run-1")
    assert [type(r) for r in results] == [StageResult] * 4
    assert results[-1].counters["added"] == 2
    assert t.heal.fn(settings, [], "default", "run-1").counters == {}
    assert t.finish_root.fn(settings, rp, "default") == (0, 0)  # (deleted, permissions updated)
    assert runtime_for(settings).states.get("default", items[0].doc_id).chunk_count >= 1


def test_prepare_on_a_store_free_runtime_then_write_is_the_batch(share_settings) -> None:
    """The two halves a Dask worker process and the flow's process run (flows/executor.py)."""
    from tasks.resources import worker_runtime_for

    root, settings = share_settings
    t.check_collection.fn(settings, "default", True)
    rp = t.plan.fn(settings, root, "default", SyncMode.FULL, False, [], [], DeleteGuard())
    worker = worker_runtime_for(settings)
    assert not hasattr(worker, "store")  # opens none: the embedded store admits one process
    prepared = t.prepare.fn(settings, runtime_for(settings).chunk_config, rp.to_process())
    assert [type(r) for r in prepared] == [StageResult] * 3
    assert all(w.prepared is not None for w in prepared[-1].work)
    chunks = sum(len(w.chunks) for w in prepared[-1].work)
    results = t.write.fn(settings, prepared, "default", "run-1")
    assert results[:3] == prepared and results[-1].counters["added"] == 2
    assert runtime_for(settings).store.count(runtime_for(settings).collection) == chunks >= 2


def test_a_stage_with_failed_files_ends_in_a_named_state(share_settings) -> None:
    root, settings = share_settings
    (root.path / "bad.pdf").write_bytes(b"%PDF-1.4 not really")
    t.check_collection.fn(settings, "default", True)
    rp = t.plan.fn(settings, root, "default", SyncMode.INCREMENTAL, False, [], [], DeleteGuard())
    state = t.batch.fn(settings, runtime_for(settings).chunk_config, rp.to_process(), "default",
                       "run-1")
    assert state.name == "Completed with failures" and "1 files failed" in state.message
    converted = state.data[0]
    assert len(converted.failures) == 1 and len(converted.work) == 2


def test_settings_that_differ_only_in_a_secret_get_their_own_runtime(settings) -> None:
    from tasks.resources import _key

    one = settings.model_copy(update={"embed_api_key": SecretStr("key-one")})
    two = settings.model_copy(update={"embed_api_key": SecretStr("key-two")})
    assert _key(one) != _key(two) and _key(one) == _key(one.model_copy())
    assert "key-one" not in _key(one)


def test_every_task_takes_its_steps_parameters():
    """A Prefect task runs its step with the runner's arguments after the context: the same
    names in the same order (a parameter added to a step alone failed every full-mode flow run
    with a ParameterBindError)."""
    import inspect

    from tasks.ingest_tasks import TASK_OF

    for step, task in TASK_OF.items():
        step_params = list(inspect.signature(step).parameters)[1:]
        task_params = list(inspect.signature(task.fn).parameters)[1:]
        assert task_params == step_params, (step.__name__, task_params, step_params)
