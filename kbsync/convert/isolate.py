"""Run :func:`kbsync.convert.convert` in worker processes with a timeout and a memory limit.

A converter that hangs, segfaults or balloons then costs one file and one worker: the
worker is killed (or found dead) and replaced, and the file is reported with a typed error:

* past the wall-clock limit -> ``ConversionTimeout`` (worker killed with SIGKILL);
* over the memory limit (``RLIMIT_AS``, the worker's address space) -> ``MemoryLimitExceeded``,
  naming the limit and ``KBSYNC_CONVERT_MEMORY_MB``: Python raises MemoryError inside the
  worker, which reports it and exits with :data:`OOM_EXIT`. The report is made after the
  failed conversion's frames are released and from a reserve of memory freed for it; should
  it still not get through, the exit status alone says so. A large but sound file (a 5 MB
  workbook can need over 2 GiB) is thus never called corrupt;
* the worker died (a signal such as SIGSEGV, or the kernel's OOM killer) -> ``CorruptDocument``
  ("converter crashed"): the file made a native library fail;
* the worker was stopped by SIGTERM, SIGINT or SIGHUP (:data:`STOP_SIGNALS`: a cancelled run's
  process group, a shutdown; kbsync itself kills only with SIGKILL), or lost with its
  forkserver (the same stop reaches it; the status is then unknown) ->
  ``ConversionInterrupted``, a transient kind: a sound file is never blamed for a stop, and the
  next run converts it again.

Workers come from a ``forkserver`` that has already imported the converters (markitdown's
import costs ~2 s), so a replacement starts in tens of milliseconds and the parent's
threads (Prefect's task runner) are never forked. Each worker handles
``max_tasks_per_worker`` files, then is recycled to bound memory fragmentation.
The pool is thread-safe: each call borrows one idle worker, blocking while all are busy.

OCR (:mod:`kbsync.convert.ocr`, when ``ocr.enabled``) runs in the same workers, and the
file's limit holds for it too (issue 37): it is one deadline per file, set when the file is
sent and never extended, whatever the pages. Before each page it reads, the worker tells the
parent how long that page may take (the page limit plus rendering); the parent then waits
for the next word until the earlier of the page's limit and the file's deadline. So one
file holds a worker (and the run's write lock) for at most ``timeout_s``; a scan longer
than that fails with ``ConversionTimeout`` naming ``KBSYNC_CONVERT_TIMEOUT_S``, and
``KBSYNC_OCR_MAX_PAGES`` refuses a file with too many pages before any is read.
"""

from __future__ import annotations

import logging
import multiprocessing
import queue
import resource
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from kbsync.convert import OcrConfig, convert
from kbsync.errors import (ConversionError, ConversionInterrupted, ConversionTimeout,
                           CorruptDocument, KbsyncError, MemoryLimitExceeded)
from kbsync.models import Document, display_path

logger = logging.getLogger(__name__)

_PRELOAD = ["kbsync.convert", "kbsync.convert.isolate", "kbsync.convert.html", "kbsync.convert.mail",
            "html_to_markdown",
            "markitdown.converters", "pymupdf", "pypdf"]
_START_TIMEOUT_S = 120.0
OOM_EXIT = 86
"""A worker's exit status after a MemoryError (a conversion over the memory limit)."""
_RESERVE_BYTES = 4 * 2**20  # freed on MemoryError, so the worker can still report it
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
"""Signals that stop a worker without saying anything about its file (kbsync sends none of
them: its own kills are SIGKILL)."""


FORKSERVER_LOST_EXIT = 255
"""The exit status multiprocessing gives every worker once its forkserver is gone: a
worker's status travels through the forkserver, and a cancelled run's SIGTERM to the
process group stops the forkserver too, often before it passes the worker's on."""


def _forkserver_pid() -> int | None:
    """The pid of this process's forkserver now (``None``: none started)."""
    from multiprocessing import forkserver

    return getattr(forkserver._forkserver, "_forkserver_pid", None)  # noqa: SLF001 - no public API


def _forkserver_exited(pid: int | None, settle_s: float = 1.0) -> bool:
    """Whether the forkserver ``pid`` has exited (or is exiting: waited up to ``settle_s``,
    as its pipes close before it becomes a zombie). Read from ``/proc``, never with
    ``waitpid``, which would reap it under multiprocessing's feet. A file cannot stop the
    forkserver, so a worker lost with it is not the file's fault. ``pid`` is the one the
    worker came from: another thread's replacement may have started a new one since."""
    if pid is None:
        return False
    deadline = time.monotonic() + settle_s
    while True:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
                state = stat.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        except (OSError, IndexError):  # no /proc: the status stays the file's
            return False
        if state in ("Z", "X"):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def _worker_main(conn: Connection, memory_mb: int | None, target: Callable[..., Document]) -> None:
    """Worker loop: receive (path, doc_id, max_bytes, ocr, within), answer ("ok", doc) or
    ("err", exc), after one ("ocr-page", seconds) per page OCR reads."""
    # Ctrl-C stops the worker by the signal itself (no KeyboardInterrupt traceback, no
    # exit status 1 that would read as the file's fault): the parent reports it as an
    # interruption (STOP_SIGNALS).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if memory_mb:
        limit = memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    from kbsync.convert import html, ocr as ocr_module, office

    office.preload()
    html.preload()
    reserve = bytearray(_RESERVE_BYTES)
    ocr_module.set_page_hook(lambda seconds: conn.send(("ocr-page", seconds)))
    conn.send(("ready", None))
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if request is None:
            return
        path, doc_id, max_bytes, ocr, within = request
        options = {"ocr": ocr} if ocr is not None and ocr.enabled else {}  # test targets take none
        if within is not None:
            options["within"] = Path(within)
        answer: tuple[str, Any] | None = None
        try:
            answer = ("ok", target(Path(path), doc_id=doc_id, max_bytes=max_bytes, **options))
        except MemoryError:
            pass  # answered below: here the traceback still holds the file's data
        except KbsyncError as exc:
            answer = ("err", exc)
        except Exception as exc:  # noqa: BLE001 - reported to the parent as a typed error
            answer = ("err", ConversionError(f"{display_path(path)}: converter failed ({type(exc).__name__}: {exc})"))
        try:
            if answer is not None:
                conn.send(answer)
                continue
        except MemoryError:  # pickling a huge document
            pass
        del answer, reserve
        _report_oom(conn)


def _report_oom(conn: Connection) -> None:
    """Tell the parent the file ran out of memory, then exit with :data:`OOM_EXIT` (the heap
    may be in a bad state: the parent starts a fresh worker)."""
    import gc
    import os

    gc.collect()
    try:
        conn.send(("oom", None))
    except (MemoryError, OSError):
        pass  # the exit status says it
    os._exit(OOM_EXIT)


def start_forkserver() -> None:
    """Start this process's forkserver now, in the background (it imports ``_PRELOAD``).

    ``kbsync ingest`` calls it before Prefect starts, so the converters' import (~4 s of
    the pool's start on 2 cores) runs while Prefect imports and its server starts; the
    pool then forks its workers from the ready forkserver. Returns at once; harmless
    when no file is converted later (the forkserver idles and exits with this process).
    """
    def run() -> None:
        try:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(_PRELOAD)
            from multiprocessing import forkserver

            forkserver.ensure_running()
        except (OSError, ValueError) as exc:  # the pool starts it later, as before
            logger.warning("could not start the conversion forkserver early: %s", exc)

    threading.Thread(target=run, name="kbsync-forkserver-start", daemon=True).start()


class _Worker:
    def __init__(self, ctx: Any, memory_mb: int | None, target: Callable[..., Document]) -> None:
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child, memory_mb, target), daemon=True)
        self.process.start()
        self.forkserver_pid = _forkserver_pid()  # the one it was forked from, just started
        child.close()
        self.tasks = 0
        try:
            if not self.conn.poll(_START_TIMEOUT_S):
                raise TimeoutError(f"no answer within {_START_TIMEOUT_S:.0f} s")
            self.conn.recv()  # ("ready", None)
        except (EOFError, OSError) as exc:
            self.kill()
            raise ConversionError(f"conversion worker failed to start: {exc}") from exc

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        self.conn.close()

    def stop(self) -> None:
        try:
            self.conn.send(None)
            self.process.join(2)
        except (OSError, ValueError):
            pass
        self.kill()


class IsolatedConverter:
    """A pool of conversion workers; use as a context manager or call :meth:`close`.

    Args:
        workers: number of worker processes (each holds its own converters in memory).
        timeout_s: wall-clock limit per file, OCR included; the worker is killed past it.
        memory_mb: address-space limit per worker (None: no limit). Address space, not
            resident memory: the imported libraries alone take ~650 MiB of it.
        max_tasks_per_worker: files a worker converts before it is replaced.
        target: the conversion function run in the worker (tests pass misbehaving ones);
            must be importable by module and name.
    """

    def __init__(self, *, workers: int = 1, timeout_s: float = 120.0, memory_mb: int | None = 2048,
                 max_tasks_per_worker: int = 200, target: Callable[..., Document] = convert) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self._ctx = multiprocessing.get_context("forkserver")
        self._ctx.set_forkserver_preload(_PRELOAD)
        self._timeout_s = timeout_s
        self._memory_mb = memory_mb
        self._max_tasks = max_tasks_per_worker
        self._target = target
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._all: set[_Worker] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._missing = workers
        try:
            self._refill()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> "IsolatedConverter":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def convert(self, path: Path, *, doc_id: str, max_bytes: int = 100 * 2**20,
                ocr: OcrConfig | None = None, within: Path | None = None) -> Document:
        """Same contract as :func:`kbsync.convert.convert`, plus ``ConversionTimeout``.

        ``ocr`` (when enabled) is handed to the target; each page it reads gets its own
        time limit, inside the file's (see the module docstring).

        Raises:
            ConversionTimeout: the file took longer than ``timeout_s`` (OCR included), or
                one OCR page longer than its own limit plus rendering.
            MemoryLimitExceeded: the worker ran out of memory (the message names the
                limit and ``KBSYNC_CONVERT_MEMORY_MB``).
            CorruptDocument: the worker crashed on this file.
            ConversionInterrupted: the worker was stopped by a signal in
                :data:`STOP_SIGNALS` (not the file's fault).
            Any error :func:`kbsync.convert.convert` raises, unchanged.
        """
        if self._closed:
            raise RuntimeError("IsolatedConverter is closed")
        name = display_path(path)
        self._refill()
        worker = self._idle.get()
        try:
            worker.conn.send((str(path), doc_id, max_bytes, ocr,
                              None if within is None else str(within)))
            deadline = time.monotonic() + self._timeout_s  # per file: never extended
            page_limit: float | None = None  # set once OCR starts: the current page's limit
            while True:
                left = deadline - time.monotonic()
                wait = left if page_limit is None else min(left, page_limit)
                if not worker.conn.poll(max(wait, 0.0)):
                    self._replace(worker)
                    raise self._timeout(name, page_limit if wait < left else None,
                                        ocr=page_limit is not None)
                status, payload = worker.conn.recv()
                if status != "ocr-page":
                    break
                page_limit = payload  # the next page's own limit, inside the file's
        except (EOFError, OSError) as exc:  # the worker died mid-file
            worker.process.join(1)
            code = worker.process.exitcode
            stopped = code is not None and code < 0 and -code in STOP_SIGNALS
            lost = code == FORKSERVER_LOST_EXIT and _forkserver_exited(worker.forkserver_pid)
            self._replace(worker)
            if code == OOM_EXIT:
                raise self._memory_error(name) from exc
            if stopped or lost:
                how = (_describe_exit(code) if stopped else
                       "its forkserver was stopped, so its exit status is unknown")
                raise ConversionInterrupted(
                    f"{name}: conversion interrupted ({how}: the run or the "
                    "machine is stopping, not a fault of the file); the next run converts it "
                    "again") from exc
            raise CorruptDocument(f"{name}: converter crashed ({_describe_exit(code)})") from exc
        if status == "oom":
            self._replace(worker)
            raise self._memory_error(name)
        self._finish(worker)
        if status == "ok":
            return payload
        raise payload

    def _timeout(self, name: str, page_limit: float | None, *, ocr: bool) -> ConversionTimeout:
        """The error of a worker killed past the file's deadline, or past one OCR page's
        limit (``page_limit``: that limit came first)."""
        if page_limit is not None:
            return ConversionTimeout(f"{name}: an OCR page took over {page_limit:g} s; "
                                     "worker killed")
        if not ocr:
            return ConversionTimeout(f"{name}: conversion took over {self._timeout_s:g} s; "
                                     "worker killed")
        return ConversionTimeout(
            f"{name}: conversion with OCR took over {self._timeout_s:g} s, the limit per file "
            "whatever its pages; worker killed (raise KBSYNC_CONVERT_TIMEOUT_S for long scans)")

    def _memory_error(self, name: str) -> MemoryLimitExceeded:
        if self._memory_mb is None:  # no limit of ours: the machine's memory ran out
            return MemoryLimitExceeded(f"{name}: the conversion worker ran out of memory "
                                       f"(the file may be sound, only large)")
        return MemoryLimitExceeded(
            f"{name}: converting it needs more than the {self._memory_mb} MiB memory limit "
            f"of a conversion worker (the file may be sound, only large); raise "
            f"KBSYNC_CONVERT_MEMORY_MB to convert it")

    def close(self) -> None:
        """Stop all workers (idempotent)."""
        with self._lock:
            self._closed = True
            workers, self._all = list(self._all), set()
        for worker in workers:
            worker.stop()

    # --- worker bookkeeping -----------------------------------------------------------
    def _spawn(self) -> _Worker:
        worker = _Worker(self._ctx, self._memory_mb, self._target)
        with self._lock:
            self._all.add(worker)
        return worker

    def _release(self, worker: _Worker) -> None:
        self._idle.put(worker)

    def _finish(self, worker: _Worker) -> None:
        worker.tasks += 1
        if not worker.process.is_alive() or worker.tasks >= self._max_tasks:
            self._replace(worker)
        else:
            self._release(worker)

    def _replace(self, worker: _Worker) -> None:
        with self._lock:
            self._all.discard(worker)
            self._missing += 1
        worker.kill()
        try:
            self._refill()
        except ConversionError as exc:  # retried by the next convert() call
            logger.warning("could not replace a conversion worker: %s", exc)

    def _refill(self) -> None:
        """Start workers to replace those lost; a failure is raised to the caller."""
        while True:
            with self._lock:
                if self._closed or self._missing == 0:
                    return
                self._missing -= 1
            try:
                self._release(self._spawn())
            except BaseException:
                with self._lock:
                    self._missing += 1
                raise


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "worker stopped answering"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"worker exited with status {code}"
