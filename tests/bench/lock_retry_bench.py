"""The write lock and the retry wrapper, before and after issue 12's libraries (a script, not a test).

    python tests/bench/lock_retry_bench.py [--cycles 2000] [--rounds 50] [--poll-s 0.05]
        [--calls 100000] [--fail-calls 20000]
        [--baseline-lock ba4a59d^:kbsync/catalog/lock.py]
        [--baseline-retry 2c54570^:kbsync/embed/service.py]

Issue 12 replaced the hand-written write lock with ``filelock`` (commit ba4a59d) and
the hand-written retry loops with ``tenacity`` (:mod:`kbsync.retrying`, commit
2c54570). This script measures both sides in one run and prints one Markdown table
(what | baseline | current | current/baseline), then the behaviour checks.

The baseline is read from git history at run time (``git show REV:PATH``), written
to a temporary folder and imported as a module:

- lock: the old ``kbsync/catalog/lock.py`` is imported whole (its one kbsync import,
  ``kbsync.errors.LockHeld``, resolves to today's module);
- retry: the old loop was not a function of its own but the methods
  ``EmbeddingService._retrying`` and ``EmbeddingService._delay`` of the old
  ``kbsync/embed/service.py``. They are extracted by name with :mod:`ast` into a
  small module (shims: ``log``, ``T``, ``Callable`` and today's
  ``kbsync.errors.EmbeddingTransientError``) and called on a stand-in object that
  carries the service's backoff settings, sleep, jitter source and lock. The current
  side calls today's ``EmbeddingService._retrying`` (on tenacity) on the same kind of
  stand-in. The chat client's old loop (``ChatClient.generate`` in
  ``kbsync/query/llm.py``) was the same algorithm written inline around one HTTP call,
  so it is not measured separately.

What is measured:

- lock, uncontended: ``with write_lock(path): pass`` cycles per second (median of 3
  runs of ``--cycles``, alternating baseline and current);
- lock, contended hand-off: a second process waits for the lock (``timeout_s=10``,
  ``poll_s=--poll-s``); the holder releases it after a random 10 ms + [0, poll_s)
  pause; the latency is from just before the holder's release to the waiter being
  inside the block (both stamps are ``time.monotonic``, system-wide on Linux);
  p50/p95 over ``--rounds``;
- retry, success first time: seconds per wrapped call of a function returning at
  once (median of 3 runs of ``--calls``), beside the bare call's cost;
- retry, two transient failures then success, sleep a no-op: per wrapped call, so
  the loop, the wait computation, the hook and the log call are timed, not waits.

Behaviour checks (asserted, printed): when attempts run out both make the same
number of calls and retries, raise the same exception type (the last exception
itself), draw the same waits from the same seeded jitter source; a permanent error
propagates from the first call; a held lock refuses a second writer with
``LockHeld`` when ``timeout_s`` is 0.

Limits: the waiter polls, so the hand-off latency is mostly the poll interval (its
mean is about ``poll_s / 2`` for both); ingest's default ``poll_s`` is 0.5 s, where
the machinery's share is smaller still. One machine, one file system (local
``tempfile`` folder), no other writers; logging below ERROR is switched off, so log
calls cost only their level check. Timings on a shared 2-core machine vary by tens of
percent between runs; read the ratios, and run it more than once.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import logging
import multiprocessing as mp
import random
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a plain script from anywhere
    sys.path.insert(0, str(ROOT))

DEFAULT_BASELINE_LOCK = "ba4a59d^:kbsync/catalog/lock.py"
DEFAULT_BASELINE_RETRY = "2c54570^:kbsync/embed/service.py"
RETRY_CLASS = "EmbeddingService"
RETRY_METHODS = ("_retrying", "_delay")
# Shims for the extracted methods: what their bodies refer to beyond ``self``.
RETRY_PREAMBLE = """\
from __future__ import annotations

import logging
from typing import Callable, TypeVar

from kbsync.errors import EmbeddingTransientError

log = logging.getLogger(__name__)
T = TypeVar("T")
"""
ATTEMPTS = 5  # the service's default max_attempts


# -- loading the baseline -------------------------------------------------------------------------
def git_show(spec: str) -> str:
    """The text of ``REV:PATH`` in this repository."""
    return subprocess.run(["git", "-C", str(ROOT), "show", spec], check=True,
                          capture_output=True, text=True).stdout


def import_source(name: str, source: str, folder: Path) -> ModuleType:
    """``source`` written to ``folder/name.py`` and imported as module ``name``."""
    path = folder / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def extract_methods(source: str, class_name: str, names: tuple[str, ...]) -> str:
    """A module text defining class ``Baseline`` with ``class_name``'s methods ``names``."""
    tree = ast.parse(source)
    cls = next((node for node in tree.body
                if isinstance(node, ast.ClassDef) and node.name == class_name), None)
    if cls is None:
        raise SystemExit(f"class {class_name} not found in the baseline retry source")
    found = {node.name: node for node in cls.body if isinstance(node, ast.FunctionDef)}
    missing = [name for name in names if name not in found]
    if missing:
        raise SystemExit(f"{class_name} has no {', '.join(missing)} in the baseline retry source")
    bodies = [textwrap.indent(textwrap.dedent(ast.get_source_segment(source, found[name],
                                                                     padded=True)), "    ")
              for name in names]
    return RETRY_PREAMBLE + "\n\nclass Baseline:\n" + "\n".join(bodies)


def stand_in(methods: type, *, sleep: Callable[[float], None], seed: int = 0):
    """An object with the service attributes the retry methods read, and those methods."""
    obj = methods.__new__(methods)
    obj.backoff_base_s, obj.backoff_max_s, obj.retry_after_max_s = 0.5, 30.0, 300.0
    obj._sleep, obj._rng, obj._lock = sleep, random.Random(seed), threading.Lock()
    return obj


def current_retry_class() -> type:
    """Today's ``EmbeddingService`` retry methods on a bare class (no provider, no cache)."""
    from kbsync.embed.service import EmbeddingService

    return type("Current", (), {"_retrying": EmbeddingService._retrying,
                                "_uniform": EmbeddingService._uniform})


# -- lock -----------------------------------------------------------------------------------------
def lock_cycles_per_s(modules: dict[str, ModuleType], path: Path, cycles: int) -> dict[str, float]:
    """Per module, the median over 3 runs of uncontended acquire+release cycles per second.

    The runs alternate between the modules, so a slow spell of a shared machine
    falls on both rather than on one.
    """
    rates: dict[str, list[float]] = {name: [] for name in modules}
    for _ in range(3):
        for name, module in modules.items():
            start = time.perf_counter()
            for _ in range(cycles):
                with module.write_lock(path):
                    pass
            rates[name].append(cycles / (time.perf_counter() - start))
    return {name: statistics.median(runs) for name, runs in rates.items()}


def _waiter(conn, modules: dict[str, ModuleType], path: Path) -> None:
    """Child process: per request, wait for the lock and report when it got it."""
    logging.getLogger().setLevel(logging.ERROR)  # "waiting for the write lock" each round
    while True:
        request = conn.recv()
        if request is None:
            return
        name, poll_s = request
        conn.send("ready")
        with modules[name].write_lock(path, timeout_s=10.0, poll_s=poll_s):
            acquired = time.monotonic()
        conn.send(acquired)  # after the release: the holder's next take must not be refused


def handoff_latencies(name: str, module: ModuleType, conn, path: Path, rounds: int,
                      poll_s: float, rng: random.Random) -> list[float]:
    """Seconds from the holder's release to the waiting process holding the lock."""
    latencies = []
    for _ in range(rounds):
        with module.write_lock(path):
            conn.send((name, poll_s))
            assert conn.recv() == "ready"
            time.sleep(0.01 + rng.uniform(0.0, poll_s))  # the waiter is polling by now
            released = time.monotonic()
        latencies.append(conn.recv() - released)
    return latencies


def refuses_when_held(module: ModuleType, path: Path) -> str:
    """The exception type a second writer gets at once while the lock is held."""
    with module.write_lock(path):
        try:
            with module.write_lock(path, timeout_s=0):
                return "none (taken twice)"
        except Exception as exc:  # noqa: BLE001 - the type is what is compared
            return type(exc).__name__


# -- retry ----------------------------------------------------------------------------------------
def per_call_s(call: Callable[[], object], n: int) -> float:
    """Median over 3 runs of seconds per ``call()``."""
    runs = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(n):
            call()
        runs.append((time.perf_counter() - start) / n)
    return statistics.median(runs)


def failing_twice(error: type[Exception]) -> Callable[[], int]:
    """A function that raises ``error`` twice, succeeds, and starts over."""
    state = [0]

    def fn() -> int:
        state[0] += 1
        if state[0] % 3:
            raise error("transient")
        return 1

    return fn


def exhaustion(methods: type, error: type[Exception], attempts: int) -> dict:
    """What the wrapper does when every call fails with ``error``."""
    from kbsync.errors import EmbeddingPermanentError

    waits: list[float] = []
    obj = stand_in(methods, sleep=waits.append, seed=7)
    raised: list[BaseException] = []

    def always() -> None:
        raised.append(error("transient"))
        raise raised[-1]

    retries = [0]
    try:
        obj._retrying(always, attempts, retries)
        final = None
    except BaseException as exc:  # noqa: BLE001 - the type is what is compared
        final = exc
    permanent_calls = [0]

    def permanent() -> None:
        permanent_calls[0] += 1
        raise EmbeddingPermanentError("permanent")

    try:
        obj._retrying(permanent, attempts, [0])
        permanent_type = "none"
    except BaseException as exc:  # noqa: BLE001
        permanent_type = type(exc).__name__
    return {"calls": len(raised), "retries": retries[0],
            "final": type(final).__name__, "final is last raised": final is raised[-1],
            "waits": [round(w, 6) for w in waits],
            "permanent": f"{permanent_type} after {permanent_calls[0]} call(s)"}


# -- report ---------------------------------------------------------------------------------------
def row(what: str, base: float, cur: float, fmt: str) -> str:
    ratio = cur / base if base else float("nan")
    return f"| {what} | {format(base, fmt)} | {format(cur, fmt)} | {ratio:.2f} |"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--poll-s", type=float, default=0.05)
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--fail-calls", type=int, default=20_000)
    parser.add_argument("--baseline-lock", default=DEFAULT_BASELINE_LOCK, metavar="REV:PATH")
    parser.add_argument("--baseline-retry", default=DEFAULT_BASELINE_RETRY, metavar="REV:PATH")
    args = parser.parse_args()
    logging.getLogger().setLevel(logging.ERROR)

    from kbsync.errors import EmbeddingTransientError
    from kbsync.catalog import lock as current_lock

    with tempfile.TemporaryDirectory(prefix="lock_retry_bench_") as tmp:
        folder = Path(tmp)
        base_lock = import_source("baseline_lock", git_show(args.baseline_lock), folder)
        base_retry = import_source(
            "baseline_retry", extract_methods(git_show(args.baseline_retry), RETRY_CLASS,
                                              RETRY_METHODS), folder).Baseline
        cur_retry = current_retry_class()
        locks = {"baseline": base_lock, "current": current_lock}
        lines = ["| what | baseline | current | current/baseline |", "|---|---|---|---|"]

        path = folder / "locks" / "bench.lock"
        rate = lock_cycles_per_s(locks, path, args.cycles)
        lines.append(row(f"lock: uncontended acquire+release, cycles/s ({args.cycles} cycles)",
                         rate["baseline"], rate["current"], ",.0f"))

        parent, child = mp.get_context("fork").Pipe()
        proc = mp.get_context("fork").Process(target=_waiter, args=(child, locks, path))
        proc.start()
        try:
            rng = random.Random(1)
            lat = {k: handoff_latencies(k, m, parent, path, args.rounds, args.poll_s, rng)
                   for k, m in locks.items()}
        finally:
            parent.send(None)
            proc.join(10)
        for label, q in (("p50", 0.5), ("p95", 0.95)):
            lines.append(row(f"lock: contended hand-off {label}, ms ({args.rounds} rounds, "
                             f"poll {args.poll_s:g} s)", pct(lat["baseline"], q) * 1e3,
                             pct(lat["current"], q) * 1e3, ".1f"))

        def ok() -> int:
            return 1

        bare = per_call_s(ok, args.calls)
        for label, fn_factory, n in (
                ("retry: success first time", lambda: ok, args.calls),
                ("retry: 2 transient failures then success (no-op sleep)",
                 lambda: failing_twice(EmbeddingTransientError), args.fail_calls)):
            us = {}
            for key, methods in (("baseline", base_retry), ("current", cur_retry)):
                obj, fn = stand_in(methods, sleep=lambda s: None), fn_factory()
                us[key] = per_call_s(lambda obj=obj, fn=fn: obj._retrying(fn, ATTEMPTS, [0]),
                                     n) * 1e6
            lines.append(row(f"{label}, µs/call ({n:,} calls)", us["baseline"], us["current"],
                             ".2f"))

        checks = {k: exhaustion(m, EmbeddingTransientError, 4)
                  for k, m in (("baseline", base_retry), ("current", cur_retry))}
        refusal = {k: refuses_when_held(m, folder / "locks" / "refuse.lock")
                   for k, m in locks.items()}

    print("\n".join(lines))
    print(f"\nbare call (no wrapper): {bare * 1e6:.3f} µs/call; baseline lock "
          f"{args.baseline_lock}, baseline retry {args.baseline_retry} "
          f"({RETRY_CLASS}.{'/'.join(RETRY_METHODS)})\n")
    print("| behaviour (4 attempts, every call transient) | baseline | current | same |")
    print("|---|---|---|---|")
    for key in checks["baseline"]:
        b, c = checks["baseline"][key], checks["current"][key]
        print(f"| {key} | {b} | {c} | {'yes' if b == c else 'NO'} |")
    print(f"| held lock, second writer, timeout 0 | {refusal['baseline']} | {refusal['current']} "
          f"| {'yes' if refusal['baseline'] == refusal['current'] else 'NO'} |")
    assert checks["baseline"] == checks["current"], "retry behaviour differs"
    assert refusal["baseline"] == refusal["current"] == "LockHeld", "lock refusal differs"


if __name__ == "__main__":
    main()
