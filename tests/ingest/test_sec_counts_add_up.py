"""A run stopped mid-way still reports counts that add up (issue 22).

Invariant of the JSON summary:
``added + updated + unchanged + failed + not_attempted == files_seen``.
Before, the wrong-dimension exit reported 150 of 160 files: the batches in flight when
the endpoint changed its dimension were counted nowhere. Now the files of the batch the run
stopped in are ``failed``, with a failure naming why the run stopped, the batches written
before it are counted as written, and the files of the batches never begun are counted
apart, in ``not_attempted`` (issue 37: they were ``failed`` too).

The real ``openai`` client talks to tests/fake_openai.py, which answers one request with
vectors of another dimension.
"""

from __future__ import annotations

import pytest

from kbsync.runtime import Runtime
from kbsync.embed import clear_service_cache
from kbsync.errors import EmbeddingPermanentError
from kbsync.ingest.discover import parse_root
from kbsync.ingest.summary import counts_of
from kbsync.ingest.runner import run_plain
from kbsync.settings import Settings
from tests.fake_openai import Fault, FakeOpenAIServer
from kbtest import fake_openai_settings

FILES = 160


def _adds_up(counts: dict) -> bool:
    return counts["added"] + counts["updated"] + counts["unchanged"] + counts["failed"] + \
        counts["not_attempted"] == counts["files_seen"]


@pytest.fixture
def runtime(tmp_path, monkeypatch):
    """A runtime over the fake server (8 dimensions, 10 files per batch); yields (runtime, server)."""
    with FakeOpenAIServer(dimension=8) as server:
        fake_openai_settings(monkeypatch, tmp_path / "home", server.url, FILES_PER_BATCH="10")
        runtime = Runtime.open(Settings())
        try:
            yield runtime, server
        finally:
            runtime.close()
            clear_service_cache()


def _share(root, start: int = 0, n: int = FILES):
    root.mkdir(exist_ok=True)
    for i in range(start, start + n):
        (root / f"d{i:03d}.md").write_text(f"# Doc {i}\n\nText {i} about rotating vectors.\n")


def _wrong_dimension_at(request_number: int):
    seen = [0]

    def plan(request):
        if request.inputs:
            seen[0] += 1
            if seen[0] == request_number:
                return Fault.wrong_dimension(4)
        return None
    return plan


def test_the_wrong_dimension_exit_counts_every_file(tmp_path, runtime):
    runtime, server = runtime
    share = tmp_path / "share"
    _share(share)
    server.set_faults(_wrong_dimension_at(9))  # batch 9 of 16

    with pytest.raises(EmbeddingPermanentError, match="wrong dimension") as caught:
        run_plain([parse_root(str(share))], runtime=runtime)

    counts = counts_of(caught.value)
    assert counts["files_seen"] == FILES and _adds_up(counts), counts
    # Batches 1-8 written (the plain loop ran them all before batch 9's error), batch 9
    # failed, batches 10-16 never begun.
    assert (counts["added"], counts["failed"], counts["not_attempted"]) == (80, 10, 70), counts
    assert len(counts["failures"]) == 10
    assert {f["error"] for f in counts["failures"]} == {"EmbeddingPermanentError"}
    assert all(f["message"].startswith("not processed: the run stopped first")
               for f in counts["failures"])
    assert any(w.startswith("70 planned file(s) not attempted: the run stopped before their "
                            "batch (EmbeddingPermanentError: ") for w in counts["warnings"])


def test_the_counts_add_up_with_unchanged_files_too(tmp_path, runtime):
    runtime, server = runtime
    share = tmp_path / "share"
    _share(share, n=40)
    assert run_plain([parse_root(str(share))], runtime=runtime).added == 40
    _share(share, start=40, n=60)  # 40 unchanged, 60 new
    server.set_faults(_wrong_dimension_at(4 + 2))  # the second new batch

    with pytest.raises(EmbeddingPermanentError) as caught:
        run_plain([parse_root(str(share))], runtime=runtime)

    counts = counts_of(caught.value)
    assert (counts["files_seen"], counts["unchanged"]) == (100, 40) and _adds_up(counts), counts
