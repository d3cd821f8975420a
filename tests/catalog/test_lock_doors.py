"""One lock rule through every front door (issue 36; the rule: :mod:`kbsync.catalog.lock`).

Two writers of one store are serialised whatever door the second comes in through: the
plain runner, the Python API (``add_text``, ``delete``), ``kbsync remove``, ``kbsync verify
--repair``, ``kbsync rebuild --rollback`` and ``--restore``. Real lock files throughout;
the distributed half uses a recording :class:`~kbsync.catalog.lock.DistributedLock` in
place of Prefect's (a writer on another machine holds it), against a server store that is
never contacted: the lock comes before the first request.
"""

from __future__ import annotations

import logging
import threading
from argparse import Namespace
from contextlib import contextmanager
from typing import Callable, Iterator

import pytest

from kbsync import api
from kbsync.app import cli_rebuild, cli_remove, cli_verify, locks as door_locks
from kbsync.catalog import lock as lock_module
from kbsync.catalog.active import resolved
from kbsync.catalog.lock import WriteLocks, ingest_lock_path, probe
from kbsync.errors import KbsyncError, LockHeld, UsageError
from kbsync.ingest.discover import parse_root
from kbsync.ingest.runner import run_plain
from kbsync.runtime import Runtime
from kbsync.settings import Settings
from kbsync.store.base import Filter

DOCS = {f"d{i}.md": f"# Doc {i}\n\nBody text number {i} about topic-{i}." for i in range(3)}
SERVER = "http://127.0.0.1:9"  # never contacted: every door locks before its first request


@pytest.fixture
def share(settings, tmp_path):
    """A share of three documents, ingested once (the state the second writer meets)."""
    folder = tmp_path / "share"
    folder.mkdir()
    for name, text in DOCS.items():
        (folder / name).write_text(text)
    with _runtime(settings) as rt:
        assert run_plain([parse_root(str(folder))], runtime=rt).added == 3
    return folder


@contextmanager
def _runtime(settings: Settings) -> Iterator[Runtime]:
    rt = Runtime.open(settings)
    try:
        yield rt
    finally:
        rt.close()


def _drift(settings: Settings) -> None:
    """Points of one document deleted behind kbsync's back: work for ``verify --repair``."""
    with _runtime(settings) as rt:
        rt.store.delete(settings.collection, Filter.where(namespace="default",
                                                          doc_id="share/d0.md"))


def _plain(settings: Settings, share) -> object:
    with _runtime(settings) as rt:
        return run_plain([parse_root(str(share))], runtime=rt, force=True)


DOORS: dict[str, Callable[[Settings, object], object]] = {
    "run_plain": _plain,
    "api add_text": lambda s, _: api.add_text("A text of its own.", "notes/n", settings=s),
    "api delete": lambda s, _: api.delete("share/d1.md", settings=s),
    "remove": lambda s, _: cli_remove.run_remove(
        Namespace(root="share", namespace=None, namespace_of_root=None, yes=True, json=True), s),
    "verify --repair": lambda s, _: cli_verify.run_verify(
        Namespace(namespace=None, repair=True, json=True), s),
    "rollback": lambda s, _: cli_rebuild._rollback(Namespace(namespace="default", json=True), s),
    "restore": lambda s, _: cli_rebuild._restore(
        Namespace(namespace="default", restore="kbsync", json=True), s),
}


def _contents(settings: Settings) -> dict:
    return api.stats(settings=settings).to_dict()


@pytest.mark.parametrize("door", sorted(DOORS))
def test_every_door_is_refused_while_another_writer_holds_the_lock(door, settings, share,
                                                                    capsys):
    _drift(settings)
    before = _contents(settings)
    with WriteLocks(settings).hold("default", "ingest"):  # the other writer
        with pytest.raises(LockHeld, match=r"^an ingest of namespace 'default' \(pid \d+\)"):
            DOORS[door](settings, share)
        assert _contents(settings) == before  # refused before its first write
    try:  # released: the same door goes through (or fails on its own merits)
        DOORS[door](settings, share)
    except LockHeld:
        pytest.fail(f"{door} still refused after the other writer released the lock")
    except KbsyncError:
        pass  # e.g. a rollback with nothing to roll back to
    capsys.readouterr()


class _WaitSeen(logging.Handler):
    """Sets ``event`` when a writer logs that it waits for the lock (the sync point)."""

    def __init__(self, event: threading.Event) -> None:
        super().__init__(logging.WARNING)
        self.event = event

    def emit(self, record: logging.LogRecord) -> None:
        if "waiting for the write lock" in record.getMessage():
            self.event.set()


@pytest.mark.parametrize("door", ["run_plain", "api add_text"])
def test_a_waiting_door_writes_only_after_the_holder_releases(door, settings, share):
    patient = settings.model_copy(update={"lock_timeout_s": 60.0})
    waiting, released = threading.Event(), threading.Event()
    order: list[str] = []
    handler = _WaitSeen(waiting)
    logging.getLogger("kbsync.catalog.lock").addHandler(handler)

    def other_writer(ready: threading.Event) -> None:
        with WriteLocks(patient).hold("default", "ingest"):
            ready.set()
            assert waiting.wait(60), "the door never waited"
            order.append("holder done")
        released.set()

    ready = threading.Event()
    holder = threading.Thread(target=other_writer, args=(ready,))
    holder.start()
    try:
        assert ready.wait(60)
        result = DOORS[door](patient, share)
        order.append("door wrote")
    finally:
        waiting.set()  # never leave the holder waiting, whatever failed
        holder.join(60)
        logging.getLogger("kbsync.catalog.lock").removeHandler(handler)
    assert released.is_set() and order == ["holder done", "door wrote"]
    assert getattr(result, "failed", 0) == 0


class Elsewhere:
    """Prefect's limit as held by a writer on another machine: records each try, refuses.

    Checks that it comes first: the lock file is still free when it is asked.
    """

    def __init__(self) -> None:
        self.tries: list[tuple[str, str]] = []

    def __call__(self, settings: Settings, namespace: str, *, purpose: str):
        return self._refuse(settings, namespace, purpose)

    @contextmanager
    def _refuse(self, settings: Settings, namespace: str, purpose: str) -> Iterator[None]:
        assert probe(ingest_lock_path(settings, namespace)) is None, "lock file taken first"
        self.tries.append((namespace, purpose))
        raise LockHeld(f"a writer on another machine holds {namespace!r}")
        yield  # pragma: no cover - a generator, for @contextmanager


@pytest.fixture
def server(settings) -> Settings:
    """Settings of a Qdrant server store (never contacted) and its active collection
    resolved already, so no door asks the server for its aliases."""
    server = settings.model_copy(update={"qdrant_url": SERVER})
    with resolved(server, server):
        yield server


def test_the_doors_decide_by_one_rule(settings, monkeypatch):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    assert door_locks.write_locks(settings).distributed is None  # embedded: one machine
    server = settings.model_copy(update={"qdrant_url": SERVER})
    # No API named: Prefect's limit would live in a temporary server of this machine only.
    assert door_locks.write_locks(server).distributed is None
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    assert door_locks.write_locks(settings).distributed is None  # embedded: one machine
    assert door_locks.write_locks(server).distributed is door_locks.prefect_lock


def test_the_decided_lock_is_taken_first_and_released_last(server, tmp_path, monkeypatch):
    events: list[str] = []
    # Once both locks are held the pointer is read again (the server's aliases: its first
    # request, tests/catalog/test_sec_waiting_writer.py); this server is never contacted.
    monkeypatch.setattr(lock_module, "current_settings", lambda settings, follow=False: settings)

    @contextmanager
    def recording(settings: Settings, namespace: str, *, purpose: str) -> Iterator[None]:
        assert probe(ingest_lock_path(settings, namespace)) is None
        events.append(f"take {namespace} {purpose}")
        yield
        events.append("release")

    with WriteLocks(server, recording).hold("team", "remove"):
        assert probe(ingest_lock_path(server, "team")) is not None  # and the file lock too
        events.append("write")
    assert events == ["take team remove", "write", "release"]
    embedded = server.model_copy(update={"qdrant_url": None})
    with WriteLocks(embedded, recording).hold("team", "remove"):
        pass  # the embedded engine: one machine, the lock file alone
    assert events == ["take team remove", "write", "release"]


def test_every_door_takes_the_decided_distributed_lock(server, settings, share, monkeypatch):
    """The doors' decision (Prefect's limit, here a writer elsewhere holding it) reaches
    every writer, which refuses before it opens the lock file or asks the server."""
    elsewhere = Elsewhere()
    monkeypatch.setattr(door_locks, "prefect_lock", elsewhere)
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")  # named, never reached
    with pytest.raises(LockHeld, match="another machine"):
        api.add_text("A text of its own.", "notes/n", settings=server)
    with pytest.raises(LockHeld, match="another machine"):
        api.delete("share/d1.md", settings=server)
    for handler in (cli_rebuild._rollback, cli_rebuild._restore):
        with pytest.raises(LockHeld, match="another machine"):
            handler(Namespace(namespace="default", json=True, restore="kbsync"), server)
    with _runtime(server) as rt, pytest.raises(LockHeld, match="another machine"):
        run_plain([parse_root(str(share))], runtime=rt, locks=door_locks.write_locks(server))
    assert elsewhere.tries == [("default", "add_text"), ("default", "delete"),
                               ("default", "rollback"), ("default", "restore"),
                               ("default", "ingest")]


def test_repair_holds_the_decision_it_is_given(settings, share):
    """``verify --repair``'s steps hold the lock they are handed (the CLI hands its door's),
    never one of their own: here a server's, held elsewhere."""
    from kbsync.maintenance.repair import finish_removals, repair
    from kbsync.maintenance.verify import verify

    _drift(settings)
    elsewhere = Elsewhere()
    locks = WriteLocks(settings.model_copy(update={"qdrant_url": SERVER}), elsewhere)
    with _runtime(settings) as rt:
        report = verify(rt.store, collection=settings.collection,
                        state_collection=settings.state_collection)
        assert report.drifted()
        with pytest.raises(LockHeld, match="another machine"):
            repair(rt, report, locks=locks)
        assert finish_removals(rt, locks=locks) == []  # nothing pending: nothing locked
    assert elsewhere.tries == [("default", "repair")]


def test_a_library_caller_without_a_decision_is_refused_against_a_server(server, share):
    """Below the doors nothing decides: without ``locks`` a server write is refused,
    never guarded on this machine only without a word."""
    with _runtime(server) as rt, pytest.raises(UsageError, match="front door's lock decision"):
        run_plain([parse_root(str(share))], runtime=rt)


def test_the_rebuild_holds_the_decision_it_is_given(server):
    """The rebuild's plain executor holds its door's decision for each collection the
    runner locks (the live one, the shadow), never one of its own; ``rebuild_plain``
    without a decision refuses a server store before any step. (The Prefect executor:
    ``tests/flows/test_rebuild_runner_prefect.py``.)"""
    from kbsync.maintenance.rebuild_plain import InProcess, rebuild_plain
    from kbsync.maintenance.rebuild_runner import RebuildRequest

    elsewhere = Elsewhere()
    executor = InProcess(Runtime.open, locks=WriteLocks(server, elsewhere))
    shadow = server.model_copy(update={"collection": "kbsync__r1", "active_of": None})
    for collection in (server, shadow):
        with pytest.raises(LockHeld, match="another machine"):
            with executor.write_lock(collection, "team"):
                pytest.fail("the lock held elsewhere was taken")
    assert elsewhere.tries == [("team", "rebuild"), ("team", "rebuild")]
    opened: list[Settings] = []
    with pytest.raises(UsageError, match="front door's lock decision"):
        rebuild_plain(RebuildRequest(settings=server, queries_file="q.jsonl"),
                      open_runtime=opened.append)  # type: ignore[arg-type]
    assert opened == []
