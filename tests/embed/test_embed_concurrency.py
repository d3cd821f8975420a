"""The default local model under concurrent batches, as the thread task runner runs them.

A Hugging Face fast tokenizer is not thread-safe: counting cut inputs with the
model's own tokenizer outside the model lock made concurrent batches fail with
"Unable to create tensor ... expected sequence of length 257 at dim 1 (got 219)"
or "Already borrowed" (issue 11). These tests embed many small batches from
several threads at once with the real all-MiniLM-L6-v2 and texts of varying
lengths, some longer than its 256 word pieces.
"""

from __future__ import annotations

import random
import threading

import pytest

from kbsync.embed import EmbeddingService
from kbsync.embed.local import LocalEmbedder

THREADS = 8
TEXTS_PER_THREAD = 16
BATCH = 2  # small batches: many hand-overs of the model lock, where the race lived

_WORDS = ("the index keeps every document of a share in sync with its vectors while "
          "workers convert chunk and embed batches of files in parallel threads").split()


def _texts(seed: int) -> list[str]:
    """Mostly short texts (quick batches), a quarter over the model's 256 word pieces."""
    rng = random.Random(seed)
    lengths = [rng.randint(280, 400) if i % 4 == 3 else rng.choice((rng.randint(3, 30), rng.randint(40, 120)))
               for i in range(TEXTS_PER_THREAD)]
    return [f"text {seed}-{i}: " + " ".join(rng.choice(_WORDS) for _ in range(n))
            for i, n in enumerate(lengths)]


def _embed_concurrently(service: EmbeddingService, work: list[list[str]]) -> tuple[list, list[str]]:
    """Each thread embeds its texts (several batches each); all start together."""
    outcomes: list = [None] * len(work)
    errors: list[str] = []
    barrier = threading.Barrier(len(work))

    def run(index: int) -> None:
        barrier.wait()
        try:
            outcomes[index] = service.embed_passages(work[index])
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(work))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes, errors


@pytest.mark.slow
def test_minilm_embeds_concurrent_batches_without_tokenizer_races() -> None:
    embedder = LocalEmbedder("all-MiniLM-L6-v2")
    embedder.load()
    service = EmbeddingService(embedder, cache=None, batch_size=BATCH)
    work = [_texts(seed) for seed in range(THREADS)]

    outcomes, errors = _embed_concurrently(service, work)

    assert errors == []
    fit = embedder.input_fit()
    assert fit is not None and fit.limit == 256
    for texts, outcome in zip(work, outcomes):
        assert outcome.failed_count == 0 and outcome.computed == len(texts)
        # Every cut input is counted once, as the model's own tokenizer sees it.
        assert outcome.truncated == sum(n > fit.limit for n in fit.count(texts)) > 0
    # Same vectors as one thread embedding the same texts alone.
    alone = embedder.embed_batch(work[0][:4])
    assert all(max(abs(a - b) for a, b in zip(u, v)) < 1e-4 for u, v in zip(alone, outcomes[0].vectors))


@pytest.mark.slow
def test_minilm_int8_embeds_concurrent_batches_like_one_thread(onnx_cache) -> None:
    """The ONNX backend: a shared session and tokenizer, eight threads at once."""
    embedder = LocalEmbedder("all-MiniLM-L6-v2-int8", model_cache=onnx_cache)
    embedder.load()
    service = EmbeddingService(embedder, cache=None, batch_size=BATCH)
    work = [_texts(seed) for seed in range(THREADS)]

    outcomes, errors = _embed_concurrently(service, work)

    assert errors == []
    fit = embedder.input_fit()
    assert fit is not None and fit.limit == 256
    for texts, outcome in zip(work, outcomes):
        assert outcome.failed_count == 0 and outcome.computed == len(texts)
        assert outcome.truncated == sum(n > fit.limit for n in fit.count(texts)) > 0
        # Each text runs alone, so a thread's vectors are exactly those of a lone call.
        assert outcome.vectors == embedder.embed_batch(texts)
