"""A file that failed for its own content is not converted again until it changes (issue 42).

A no-op sync of a share holding one known-bad file converts nothing: the file is reported
failed again, with the same doc_id, code and message (the report's one WARNING line a failed
file), one INFO line each that says why it was not converted, and counted in
``failed_remembered``, whose count line says `--force` retries them. Touching, fixing or deleting the file,
changing the settings that shape a conversion, or ``--force`` retries or forgets it; a
transient failure is never remembered (:mod:`kbsync.catalog.failed`).
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace

import pytest
from kbtest import recording_executor, write_tree
from kbsync.catalog import failed
from kbsync.catalog.state import StateStore
from kbsync.errors import ConversionTimeout, StoreUnavailable
from kbsync.ingest import steps
from kbsync.ingest.discover import parse_root
from kbsync.ingest.report import count_line
from kbsync.ingest.runner import IngestRequest, run_ingest
from kbsync.ingest.stages import StageResult, convert_stage
from kbsync.models import SyncMode
from kbsync.store.base import Filter

RSA = ("-----BEGIN RSA PRIVATE KEY-----\n"
       "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
       "-----END RSA PRIVATE KEY-----\n")
SHARE = {"good.md": "# Good\n\ngood text", "bad.pdf": "not a pdf at all",
         "key.md": f"# Deploy\n\n```\n{RSA}```\n"}
BAD = {"share/bad.pdf": "CorruptDocument", "share/key.md": "SecretDetected"}


def _run(runtime, share, **options):
    executor = recording_executor(runtime)
    request = IngestRequest(roots=(parse_root(str(share)),), **options)
    return run_ingest(request, executor).to_dict(), executor


def _failures(summary) -> dict[str, dict]:
    return {f["doc_id"]: f for f in summary["failures"]}


def _remembered(runtime) -> set[str]:
    return set(failed.load(runtime.states, "default", "share"))


def test_a_no_op_with_known_bad_files_converts_nothing_and_reports_them_again(
        adapter_runtime, tmp_path, caplog):
    share = tmp_path / "share"
    write_tree(share, SHARE)
    first, _ = _run(adapter_runtime, share)
    assert (first["added"], first["failed"], first["failed_remembered"]) == (1, 2, 0)
    assert {d: f["error"] for d, f in _failures(first).items()} == BAD
    assert _remembered(adapter_runtime) == set(BAD)
    caplog.set_level(logging.INFO, logger="kbsync")
    again, executor = _run(adapter_runtime, share, mode=SyncMode.FULL)
    # no conversion: no root run, no batch, no convert stage; nothing hashed
    assert (executor.roots, executor.ran.count("batch")) == ([], 0)
    assert "convert" not in again["stage_s"] and again["files_hashed"] == 0
    assert _failures(again) == _failures(first)  # the same doc_id, path, code and message
    assert (again["files_seen"], again["unchanged"], again["failed"],
            again["failed_remembered"], again["deleted"]) == (3, 1, 2, 2, 0)
    lines = [r for r in caplog.records if "unchanged since it failed" in r.getMessage()]
    assert len(lines) == 2 and all(r.levelno == logging.INFO and "--force" in r.getMessage()
                                   for r in lines)
    assert ("failed 2 (2 unchanged since they failed: not converted again; `kbsync ingest "
            "--force` retries them)") in count_line(again)


def test_touching_a_known_bad_file_retries_it(runtime, tmp_path):
    share = tmp_path / "share"
    write_tree(share, SHARE)
    _run(runtime, share)
    stat = (share / "bad.pdf").stat()
    os.utime(share / "bad.pdf", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    again, executor = _run(runtime, share)
    assert executor.ran.count("batch") == 1 and "convert" in again["stage_s"]
    assert (again["failed"], again["failed_remembered"]) == (2, 1)  # key.md remembered
    assert _remembered(runtime) == set(BAD)  # remembered anew, for its new mtime
    third, executor = _run(runtime, share)
    assert (executor.ran.count("batch"), third["failed_remembered"]) == (0, 2)


def test_fixing_a_known_bad_file_indexes_it_and_forgets_the_failure(adapter_runtime, tmp_path):
    share = tmp_path / "share"
    write_tree(share, SHARE)
    _run(adapter_runtime, share)
    write_tree(share, {"key.md": "# Deploy\n\nthe key lives in the vault now"})
    again, _ = _run(adapter_runtime, share)
    assert (again["added"], again["failed"], again["failed_remembered"]) == (1, 1, 1)
    assert _remembered(adapter_runtime) == {"share/bad.pdf"}
    assert adapter_runtime.states.get("default", "share/key.md") is not None


def test_deleting_a_known_bad_file_forgets_the_failure(adapter_runtime, tmp_path):
    share = tmp_path / "share"
    write_tree(share, SHARE)
    _run(adapter_runtime, share)
    (share / "bad.pdf").unlink()
    again, executor = _run(adapter_runtime, share)
    assert (executor.roots, again["failed"], again["files_seen"]) == ([], 1, 2)
    assert _remembered(adapter_runtime) == {"share/key.md"}


def test_force_retries_known_bad_files(runtime, tmp_path):
    share = tmp_path / "share"
    write_tree(share, SHARE)
    first, _ = _run(runtime, share)
    forced, executor = _run(runtime, share, force=True)
    assert executor.ran.count("batch") == 1 and "convert" in forced["stage_s"]
    assert (forced["failed"], forced["failed_remembered"]) == (2, 0)
    assert _failures(forced) == _failures(first)
    again, executor = _run(runtime, share)  # failed again, so remembered again
    assert (executor.ran.count("batch"), again["failed_remembered"]) == (0, 2)


def test_a_settings_change_retries_known_bad_files(runtime, tmp_path):
    share = tmp_path / "share"
    write_tree(share, {"big.txt": "word " * 400_000})  # 2 MB
    small = replace(runtime, settings=runtime.settings.model_copy(update={"max_file_mb": 1}))
    first, _ = _run(small, share)
    assert [f["error"] for f in first["failures"]] == ["FileTooLarge"]
    assert _run(small, share)[0]["failed_remembered"] == 1
    again, executor = _run(runtime, share)  # the default limit (100 MB): a new key
    assert (executor.ran.count("batch"), again["added"], again["failed"]) == (1, 1, 0)
    assert _remembered(runtime) == set()


def test_an_indexed_document_that_now_fails_keeps_its_points_and_is_remembered(
        runtime, tmp_path):
    share = tmp_path / "share"
    write_tree(share, {"a.md": "# Alpha\n\nalpha text"})
    assert _run(runtime, share)[0]["added"] == 1
    write_tree(share, {"a.md": "  \n\n "})  # EmptyDocument from now on
    flt = Filter.where(namespace="default", doc_id="share/a.md")
    for run in range(2):
        summary, executor = _run(runtime, share)
        assert [f["error"] for f in summary["failures"]] == ["EmptyDocument"]
        assert (executor.ran.count("batch"), summary["failed_remembered"]) == (1 - run, run)
        assert runtime.store.count(runtime.collection, flt) == 1  # the old version stays
    assert _remembered(runtime) == {"share/a.md"}


def _timing_out(path, **_):
    raise ConversionTimeout(f"{path.name}: conversion took longer than 1 s")


def test_a_transient_failure_is_not_remembered(runtime, tmp_path):
    share = tmp_path / "share"
    write_tree(share, {"slow.md": "# Slow\n\nslow text"})
    rp = steps.plan(runtime, parse_root(str(share)), "default", SyncMode.INCREMENTAL, False,
                    (), (), steps.DeleteGuard())
    converted = convert_stage(rp.to_process(), max_bytes=2**20, converter=_timing_out)
    assert [f.error for f in converted.failures] == ["ConversionTimeout"]
    steps.write(runtime, [converted, StageResult(), StageResult()], "default", "run")
    assert _remembered(runtime) == set()
    assert not failed.is_remembered(converted.failures[0].error)
    assert _run(runtime, share)[0]["added"] == 1  # the next run converts it


def test_removing_the_share_forgets_its_failures(runtime, tmp_path):
    from kbsync.ingest.remove import Target, remove

    share = tmp_path / "share"
    write_tree(share, SHARE)
    _run(runtime, share)
    remove(runtime.store, collection=runtime.collection,
           state_collection=runtime.settings.state_collection, target=Target("default", "share"))
    assert runtime.states.count_meta(failed.FAILED_FILE) == 0


class ChunkUpsertFails:
    """A real store whose upserts to the chunk collection fail while ``armed``: the store
    lost in the middle of a batch's write step."""

    def __init__(self, store, chunks: str) -> None:
        self._store, self._chunks, self.armed = store, chunks, True

    def __getattr__(self, name):
        return getattr(self._store, name)

    def upsert(self, collection, points):
        if self.armed and collection == self._chunks:
            raise StoreUnavailable("injected: the store went away mid-batch")
        return self._store.upsert(collection, points)


def test_a_store_lost_mid_batch_never_leaves_a_file_wrongly_skipped(runtime, tmp_path):
    share = tmp_path / "share"
    write_tree(share, SHARE)
    _run(runtime, share)
    write_tree(share, {"key.md": "# Deploy\n\nthe key lives in the vault now",
                       "blank.md": "  \n\n "})  # key.md fixed; blank.md new, EmptyDocument
    faulty = ChunkUpsertFails(runtime.store, runtime.collection)
    broken = replace(runtime, store=faulty,
                     states=StateStore(faulty, runtime.settings.state_collection))
    with pytest.raises(StoreUnavailable):
        _run(broken, share)
    # key.md's stale failure went before any write; blank.md's is not kept, its batch unwritten
    assert _remembered(runtime) == {"share/bad.pdf"}
    faulty.armed = False
    again, _ = _run(runtime, share)
    assert (again["added"], again["failed"], again["failed_remembered"]) == (1, 2, 1)
    assert _remembered(runtime) == {"share/bad.pdf", "share/blank.md"}
