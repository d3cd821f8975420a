"""An input-dependent HTTP 500 with poisoned texts in both halves of a batch is not an
outage (issues 22 and 37): bisection splits on until single inputs fail, and only the
poisoned texts fall back; the rest is embedded and stored. Failing single inputs do not
end it while none has succeeded (issue 37: a batch of two poisoned files and a good one
was read as an outage); only an endpoint that fails everything within the budget is down.

Before, both halves failing transiently ended the bisection at once ("the endpoint looks
down"): the whole batch fell back, and a run whose every document sat in that batch
exited 1 with EmbeddingOutage. The real ``openai`` client talks to tests/fake_openai.py.
"""

from __future__ import annotations

import random

import pytest

from kbsync.runtime import Runtime
from kbsync.embed import EmbeddingService, clear_service_cache
from kbsync.embed.bisect import bisect_budget
from kbsync.embed.openai_provider import OpenAIEmbedder
from kbsync.errors import EmbeddingOutage
from kbsync.ingest.discover import parse_root
from kbsync.ingest.runner import run_plain
from kbsync.settings import Settings
from tests.fake_openai import Fault, FakeOpenAIServer
from kbtest import fake_openai_settings

POISON = "POISON-PILL"


def _poisoned_500(request):
    """A 500 for any request holding a poisoned text (as some servers answer a bad input)."""
    if any(POISON in text for text in request.inputs):
        return Fault.error(500, "internal error while embedding")
    return None


def _service(server: FakeOpenAIServer, sleeps, **kwargs) -> EmbeddingService:
    embedder = OpenAIEmbedder("fake-embedding", base_url=server.url, api_key="k",
                              dimensions=server.dimension, timeout_s=5.0)
    return EmbeddingService(embedder, sleep=sleeps, rng=random.Random(0), **kwargs)


def _texts(n: int, poisoned: set[int]) -> list[str]:
    return [f"chunk {i} about vectors" + (f" {POISON}" if i in poisoned else "") for i in range(n)]


def test_poison_in_both_halves_is_isolated_not_taken_for_an_outage(fake_server, sleeps):
    fake_server.set_faults(_poisoned_500)
    service = _service(fake_server, sleeps, cache=None, batch_size=64, max_attempts=2)

    outcome = service.embed_passages(_texts(64, {3, 40}))  # one in each half

    assert [i for i, f in enumerate(outcome.failed) if f] == [3, 40]
    assert outcome.computed == 62 and not outcome.all_failed
    assert 0 < outcome.bisect_requests <= bisect_budget(64)


def test_a_500_on_every_request_stays_an_outage_within_the_budget(fake_server, sleeps):
    fake_server.set_faults(lambda request: Fault.error(500))
    service = _service(fake_server, sleeps, cache=None, batch_size=64, max_attempts=2)

    outcome = service.embed_passages(_texts(64 * 4, set()))

    assert outcome.all_failed and outcome.failed_count == 64 * 4
    # Batch 1: 2 attempts, then bisected until its budget is spent (failing single inputs
    # prove nothing while none succeeded, issue 37). Batch 2: 2 attempts, after which the
    # endpoint counts as down: no bisection, one attempt per further batch.
    assert outcome.bisect_requests == bisect_budget(64) == 24
    assert len(fake_server.embedding_requests()) == (2 + 24) + 2 + 1 + 1


def test_ingest_stores_the_good_texts_of_a_batch_poisoned_in_both_halves(tmp_path, monkeypatch,
                                                                         fake_server):
    share = tmp_path / "share"
    share.mkdir()
    # 40 paragraphs under their own headings: 40 chunks, one batch of 64.
    sections = [f"# Part {i}\n\nParagraph {i} explains how the sync keeps vectors current."
                for i in range(40)]
    sections[2] += f" {POISON}"
    sections[33] += f" {POISON}"
    (share / "guide.md").write_text("\n\n".join(sections), encoding="utf-8")
    fake_server.set_faults(_poisoned_500)
    fake_openai_settings(monkeypatch, tmp_path / "home", fake_server.url, EMBED_MAX_ATTEMPTS="2")
    monkeypatch.setattr("time.sleep", lambda s: None)  # the batch's own backoff
    runtime = Runtime.open(Settings())
    try:
        summary = run_plain([parse_root(str(share))], runtime=runtime).to_dict()  # no outage
    finally:
        runtime.close()
        clear_service_cache()

    assert (summary["added"], summary["failed"], summary["partial"]) == (1, 0, 1)
    assert summary["embeddings_failed"] == 2 and summary["embeddings_computed"] == 38


def test_poisoned_single_inputs_first_do_not_end_the_bisection(fake_server, sleeps):
    # Issue 37: the first two inputs fail alone before anything was embedded; the third is
    # sound. Before, that read as "the endpoint looks down" and the good text fell back.
    fake_server.set_faults(_poisoned_500)
    for poisoned, size in (({0, 1}, 3), ({0, 1, 2}, 4), ({0, 1, 4, 5}, 6)):
        service = _service(fake_server, sleeps, cache=None, batch_size=64, max_attempts=2)

        outcome = service.embed_passages(_texts(size, poisoned))

        assert {i for i, f in enumerate(outcome.failed) if f} == poisoned, size
        assert outcome.computed == size - len(poisoned)
        assert outcome.bisect_requests <= bisect_budget(size)


def _three_files_run(tmp_path, monkeypatch, server: FakeOpenAIServer) -> dict:
    """Ingest a.md and b.md (poisoned) and c.md (sound), one chunk each, in one batch."""
    share = tmp_path / "share"
    share.mkdir()
    for name, extra in (("a.md", f" {POISON}"), ("b.md", f" {POISON}"), ("c.md", "")):
        (share / name).write_text(f"# {name}\n\nHow the sync keeps vectors current.{extra}\n",
                                  encoding="utf-8")
    fake_openai_settings(monkeypatch, tmp_path / "home", server.url, EMBED_MAX_ATTEMPTS="2")
    monkeypatch.setattr("time.sleep", lambda s: None)
    runtime = Runtime.open(Settings())
    try:
        return run_plain([parse_root(str(share))], runtime=runtime).to_dict()
    finally:
        runtime.close()
        clear_service_cache()


def test_a_run_of_poisoned_files_and_one_good_file_is_not_an_outage(tmp_path, monkeypatch,
                                                                     fake_server):
    # Two poisoned files (a 500 for any request holding one), one sound. The sound one is
    # stored; the two are failed files naming why; no outage (the flow then ends with
    # FilesFailed, exit 3, not EmbeddingOutage, exit 1).
    fake_server.set_faults(_poisoned_500)

    summary = _three_files_run(tmp_path, monkeypatch, fake_server)  # no outage raised

    assert (summary["added"], summary["failed"], summary["embeddings_computed"]) == (1, 2, 1)
    assert sorted(f["doc_id"] for f in summary["failures"]) == ["share/a.md", "share/b.md"]
    for failure in summary["failures"]:
        assert failure["error"] == "EmbeddingFailed"
        assert "failed on these texts while it embedded others" in failure["message"]


def test_a_run_whose_every_request_gets_a_500_is_still_an_outage(tmp_path, monkeypatch,
                                                                 fake_server):
    fake_server.set_faults(lambda request: Fault.error(500))

    with pytest.raises(EmbeddingOutage, match="every document failed to embed"):
        _three_files_run(tmp_path, monkeypatch, fake_server)

    # The batch's 2 attempts, then its bisection within the budget, nothing more.
    assert len(fake_server.embedding_requests()) <= 2 + bisect_budget(3)
