"""Process isolation: a hanging, crashing or ballooning converter costs one file and one worker."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from kbsync.convert import convert
from kbsync.convert.isolate import IsolatedConverter
from kbsync.errors import (ConversionError, ConversionInterrupted, ConversionTimeout,
                           CorruptDocument, TransientError)
from kbsync.models import Document

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"


# Misbehaving converters, run inside the workers (module-level so workers can import them).
def misbehaving_convert(path: Path, *, doc_id: str, max_bytes: int) -> Document:
    if path.name == "hang.txt":
        time.sleep(600)
    if path.name == "crash.txt":
        os.kill(os.getpid(), signal.SIGSEGV)
    if path.name.startswith("stop-"):  # stop-SIGTERM.txt: a stop signal, as a cancelled run's
        os.kill(os.getpid(), signal.Signals[path.stem.removeprefix("stop-")])
        time.sleep(5)  # the signal lands first
    if path.name == "group-stop.txt":  # a stop of the process group that lands on the
        os.kill(os.getppid(), signal.SIGTERM)  # forkserver (the worker's parent) first
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    if path.name == "late-stop.txt":  # the same stop, reaching a second worker later
        time.sleep(1.5)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    if path.name == "balloon.txt":
        hog = bytearray(3 * 2**30)  # over the 1.5 GiB address-space limit below
        del hog
    return convert(path, doc_id=doc_id, max_bytes=max_bytes)


@pytest.fixture(scope="module")
def pool():
    with IsolatedConverter(workers=1, timeout_s=2, memory_mb=1536, target=misbehaving_convert) as p:
        yield p


def test_same_result_as_in_process(pool: IsolatedConverter) -> None:
    for rel in ("policies/security-policy.pdf", "incidents/2024-03-12-ingestion-outage.docx"):
        assert pool.convert(SAMPLE / rel, doc_id=rel) == convert(SAMPLE / rel, doc_id=rel)


def test_typed_errors_cross_the_process_boundary(pool: IsolatedConverter, write) -> None:
    with pytest.raises(CorruptDocument, match="not a readable PDF"):
        pool.convert(write("garbage.pdf", b"%PDF-1.7 garbage"), doc_id="t")


def test_hang_is_killed_and_the_worker_replaced(pool: IsolatedConverter, write) -> None:
    path = write("hang.txt", "x")
    started = time.perf_counter()
    with pytest.raises(ConversionTimeout) as info:
        pool.convert(path, doc_id="t")
    assert time.perf_counter() - started < 10
    assert str(info.value).startswith(str(path))
    assert pool.convert(write("ok.txt", "still working"), doc_id="t").markdown == "still working"


def test_crash_is_reported_and_the_worker_replaced(pool: IsolatedConverter, write) -> None:
    with pytest.raises(CorruptDocument, match="SIGSEGV"):
        pool.convert(write("crash.txt", "x"), doc_id="t")
    assert pool.convert(write("ok.txt", "after crash"), doc_id="t").markdown == "after crash"


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_stop_signal_is_an_interruption_not_a_corrupt_file(pool: IsolatedConverter, write,
                                                             stop: str) -> None:
    # Issue 37: a cancelled run's SIGTERM to the process group killed the worker, and the
    # sound file it was converting was reported "CorruptDocument: converter crashed".
    with pytest.raises(ConversionInterrupted, match=f"interrupted \\(killed by {stop}") as info:
        pool.convert(write(f"stop-{stop}.txt", "a sound file"), doc_id="t")
    assert isinstance(info.value, TransientError) and not isinstance(info.value, CorruptDocument)
    assert "next run converts it again" in str(info.value)
    assert pool.convert(write("ok.txt", "after a stop"), doc_id="t").markdown == "after a stop"


def test_a_worker_lost_with_its_stopped_forkserver_is_an_interruption(pool: IsolatedConverter,
                                                                      write) -> None:
    # A cancelled deployment run: the SIGTERM to the process group stopped the forkserver
    # before it passed the worker's status on (multiprocessing then says 255), and the sound
    # file was remembered as "CorruptDocument: converter crashed", never to be retried.
    with pytest.raises(ConversionInterrupted, match="forkserver was stopped") as info:
        pool.convert(write("group-stop.txt", "a sound file"), doc_id="t")
    assert not isinstance(info.value, CorruptDocument)
    # The pool starts a new forkserver and goes on.
    assert pool.convert(write("ok.txt", "after the group stop"), doc_id="t").markdown == \
        "after the group stop"


def test_every_worker_lost_with_the_stopped_forkserver_is_an_interruption(write) -> None:
    # Two files in flight: the first loss starts a new forkserver; the second worker came
    # from the old one, and its loss is judged by that one, not by the new.
    from concurrent.futures import ThreadPoolExecutor

    files = [write("group-stop.txt", "a sound file"), write("late-stop.txt", "another")]
    with IsolatedConverter(workers=2, timeout_s=10, target=misbehaving_convert) as pool, \
            ThreadPoolExecutor(2) as threads:
        futures = [threads.submit(pool.convert, path, doc_id=path.name) for path in files]
        errors = [future.exception() for future in futures]
        assert all(isinstance(error, ConversionInterrupted) for error in errors), errors


def test_memory_limit(pool: IsolatedConverter, write) -> None:
    with pytest.raises(ConversionError, match="memory limit"):
        pool.convert(write("balloon.txt", "x"), doc_id="t")
    assert pool.convert(write("ok.txt", "after balloon"), doc_id="t").markdown == "after balloon"


def test_pool_is_thread_safe() -> None:
    import threading

    rels = ["engineering/api-reference.html", "product/roadmap-2024.pptx", "zh/faq.md",
            "support/tickets-2024-q1.csv", "policies/security-policy.pdf", "zh/ops-runbook.txt"]
    expected = {r: convert(SAMPLE / r, doc_id=r) for r in rels}
    got: dict[str, Document] = {}
    with IsolatedConverter(workers=2, timeout_s=60) as pool:
        threads = [threading.Thread(target=lambda r=r: got.__setitem__(r, pool.convert(SAMPLE / r, doc_id=r)))
                   for r in rels]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert got == expected
