"""A writer that waited for the write lock writes the collection active NOW (issue 37): a
``kbsync rebuild`` that swapped while it waited must not leave it writing the replaced one.

:meth:`kbsync.catalog.lock.WriteLocks.hold` resolves the pointer again once the lock is
held: refused by default (``StoreUnavailable``: run it again), followed with ``follow``
(``kbsync remove``). Real lock files and pointer files, a thread as the rebuild; the test
waits on the waiter's own "waiting for the write lock" warning, never on time.
The CLI story (a real rebuild, a real waiting ``kbsync remove``) is in
``tests/flows/test_sec_rollback.py``.
"""

from __future__ import annotations

import logging
import threading

import pytest

from kbsync.catalog import active
from kbsync.catalog.lock import WriteLocks
from kbsync.errors import StoreUnavailable
from kbsync.store import active as pointer


class _Waiting(logging.Handler):
    """Sets ``event`` when a writer starts to wait for the lock."""

    def __init__(self) -> None:
        super().__init__()
        self.event = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "waiting for the write lock" in record.getMessage():
            self.event.set()


@pytest.fixture
def waiting():
    handler = _Waiting()
    logger = logging.getLogger("kbsync.catalog.lock")
    logger.addHandler(handler)
    yield handler.event
    logger.removeHandler(handler)


def _swap_while_held(settings, waiting: threading.Event, record: pointer.ActiveRecord):
    """A thread that holds the lock as a rebuild does, swaps once a writer waits, releases."""
    held, errors = threading.Event(), []

    def rebuild():
        try:
            with WriteLocks(settings).hold("default", "rebuild"):
                held.set()
                assert waiting.wait(30), "the writer never waited for the lock"
                pointer.write_pointer(settings.home, record)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
            held.set()

    thread = threading.Thread(target=rebuild)
    thread.start()
    assert held.wait(30)
    return thread, errors


@pytest.mark.parametrize("first_swap", [True, False], ids=["first-swap", "second-swap"])
def test_a_waiting_remove_follows_the_swap(settings, waiting, first_swap):
    settings = settings.model_copy(update={"lock_timeout_s": 60})
    if not first_swap:
        pointer.write_pointer(settings.home, pointer.ActiveRecord("kbsync", "kbsync__r1",
                                                                  "kbsync"))
    before = active.resolve(settings)
    assert before.collection == ("kbsync" if first_swap else "kbsync__r1")
    new = "kbsync__r1" if first_swap else "kbsync__r2"
    thread, errors = _swap_while_held(settings, waiting, pointer.ActiveRecord(
        "kbsync", new, before.collection, {"chunk_tokens": 64}))
    with WriteLocks(before).hold("default", "remove", follow=True) as now:
        assert (now.collection, now.active_of, now.chunk_tokens) == (new, "kbsync", 64)
        assert now.state_collection == f"{new}_state"
    thread.join()
    assert not errors, errors


def test_a_waiting_writer_without_follow_is_refused(settings, waiting):
    settings = settings.model_copy(update={"lock_timeout_s": 60})
    before = active.resolve(settings)
    thread, errors = _swap_while_held(settings, waiting,
                                      pointer.ActiveRecord("kbsync", "kbsync__r1", "kbsync"))
    with pytest.raises(StoreUnavailable, match="now serves from kbsync__r1, not kbsync"):
        with WriteLocks(before).hold("default", "repair"):
            pytest.fail("the block ran on the replaced collection")
    thread.join()
    assert not errors, errors


def test_an_unchanged_pointer_and_the_pointers_own_writers_pass(settings):
    before = active.resolve(settings)
    with WriteLocks(before).hold("default", "ingest") as now:
        assert now is before
    pointer.write_pointer(settings.home, pointer.ActiveRecord("kbsync", "kbsync__r1", "kbsync"))
    for purpose in ("rebuild", "rollback", "restore"):  # they read the pointer under the lock
        with WriteLocks(before).hold("default", purpose) as now:
            assert now is before
