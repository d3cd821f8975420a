"""One :class:`Runtime` per process, shared by every task of a run.

The embedded engine allows one handle per folder and the local model should
load once, so tasks look their runtime up here instead of opening their own.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import threading

from kbsync.embed.base import Embedder
from kbsync.runtime import Runtime, WorkerRuntime
from kbsync.settings import SecretStr, Settings

_lock = threading.Lock()
_runtimes: dict[str, Runtime[Embedder]] = {}
_workers: dict[str, WorkerRuntime] = {}


def _key(settings: Settings) -> str:
    """Equal for equal settings, secrets included (a JSON dump masks them, so two settings
    that differ only in their API key would share a runtime); the key holds only a hash."""
    values = {name: value.get_secret_value() if isinstance(value, SecretStr) else value
              for name, value in settings}
    text = json.dumps(values, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def runtime_for(settings: Settings) -> Runtime[Embedder]:
    """The process-wide runtime for ``settings`` (opened on first use)."""
    key = _key(settings)
    with _lock:
        runtime = _runtimes.get(key)
        if runtime is None:
            # The flow's process holds the embedded store for the whole run: serve
            # other processes' reads (search, stats, ask) meanwhile.
            runtime = _runtimes[key] = Runtime.open(settings, serve_readers=True)
        return runtime


def adopt(runtime: Runtime[Embedder]) -> None:
    """Make ``runtime`` (opened in this process, store and relay included) the one
    :func:`runtime_for` returns for its settings, so a flow run that follows uses that open
    store instead of closing and opening it again (the CLI's plan before its flow:
    ``kbsync.app.cli_recorded``). One already open for those settings is kept and
    ``runtime`` closed."""
    key = _key(runtime.settings)
    with _lock:
        kept = _runtimes.setdefault(key, runtime)
    if kept is not runtime:
        runtime.close()


def worker_runtime_for(settings: Settings) -> WorkerRuntime:
    """The process-wide store-free runtime for ``settings`` (a Dask worker process's: it
    prepares batches for the flow's process, which holds the embedded store)."""
    key = _key(settings)
    with _lock:
        runtime = _workers.get(key)
        if runtime is None:
            runtime = _workers[key] = WorkerRuntime.open(settings)
        return runtime


def release(settings: Settings) -> None:
    """Close and forget the runtime of ``settings`` (frees the store folder)."""
    with _lock:
        runtime = _runtimes.pop(_key(settings), None)
    if runtime is not None:
        runtime.close()


@atexit.register
def _close_all() -> None:
    with _lock:
        runtimes: list[Runtime[Embedder] | WorkerRuntime] = [*_runtimes.values(),
                                                              *_workers.values()]
        _runtimes.clear()
        _workers.clear()
    for runtime in runtimes:
        runtime.close()
