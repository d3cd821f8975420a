"""Prefect's temporary server, started before Prefect is imported (``kbsync ingest``).

Without ``PREFECT_API_URL`` a flow run starts a temporary Prefect server, and waits for it,
only once the flow is called: after Prefect's import (1.5-5 s on 2 cores) and the import of
the server's app into this process (~2.2 s), the server process then takes ~7 s more to
answer. :func:`start` launches the very same server process (the uvicorn command and
environment Prefect's ``SubprocessASGIServer`` uses) first, so its start-up runs while
this process imports Prefect; :meth:`TemporaryServer.use` then points the process's
Prefect at it (``temporary_settings``, Prefect's own override), and it is stopped at exit,
after Prefect's own exit-time flushes, as Prefect stops its temporary server.

Limits, on purpose:

* only when ``PREFECT_API_URL`` is not in the environment; if Prefect's own settings (a
  profile, ``prefect.toml``) name an API after all, the early server is stopped unused
  and the run goes to that API, as it always did;
* a server that does not answer within ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS``
  (kbsync sets 120 s), or exits, raises :class:`~kbsync.errors.OrchestratorUnavailable`
  with the tail of its output; nothing has run by then;
* the run's watchdog (:mod:`tasks.watchdog`) now watches this server too: it lives and
  dies with this process, so a crash of it stops the run the same way;
* whatever ends this process, the server ends with it: :meth:`TemporaryServer.stop` at
  exit (SIGTERM and SIGHUP reach it too, :mod:`kbsync.app.cli_signals`), and on Linux the
  kernel kills the server when this process dies without its exit hooks (SIGKILL, the
  watchdog's ``os._exit``): ``PR_SET_PDEATHSIG``. Before, every killed run left one
  uvicorn of ~220 MB running for good.

Nothing here imports Prefect at module level: importing this module costs nothing.
"""

from __future__ import annotations

import atexit
import importlib.util
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from kbsync.errors import OrchestratorUnavailable

log = logging.getLogger(__name__)

_POLL_S = 0.1


class TemporaryServer:
    """One Prefect server process on a free local port (see the module docstring)."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.api_url = f"http://127.0.0.1:{self.port}/api"
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the server
        spec = importlib.util.find_spec("prefect")
        # Prefect is installed with kbsync: its spec names the package's __init__.py.
        assert spec is not None and spec.origin is not None, "prefect is not installed"
        app_dir = str(Path(spec.origin).parent.parent)  # what prefect.__module_path__.parent names
        env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1",
               "PREFECT__SERVER_FINAL": "1"}
        # stdout too goes to the log: `kbsync ingest --json` keeps stdout for its JSON object
        self._process: subprocess.Popen | None = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--app-dir", app_dir, "--factory",
             "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port",
             str(self.port), "--log-level", "error", "--lifespan", "on"],
            env=env, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent())
        self._override: AbstractContextManager[Any] | None = None
        atexit.register(self.stop)  # before Prefect's import: runs after its exit hooks

    def use(self) -> None:
        """Point this process's Prefect at the server, for the rest of the process.

        Called once Prefect is imported. The override stays until exit (this is a
        one-command process): Prefect's log and event workers flush at exit and must
        still find the server, which :meth:`stop` ends last (its ``atexit`` hook was
        registered before Prefect's).

        Raises:
            OrchestratorUnavailable: the server exited or did not answer in time.
        """
        from prefect.settings import PREFECT_API_URL, temporary_settings

        if PREFECT_API_URL.value():  # a profile or prefect.toml names an API: use that one
            self.stop()
            return
        self._wait_healthy()
        self._override = temporary_settings(updates={PREFECT_API_URL: self.api_url})
        self._override.__enter__()

    def stop(self) -> None:
        """Terminate the server (idempotent), as Prefect stops its temporary one."""
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        self._log.close()

    def _wait_healthy(self) -> None:
        limit = float(os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120"))
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            process = self._process
            if process is None or process.poll() is not None:
                raise OrchestratorUnavailable(
                    f"the temporary Prefect server exited ({'stopped' if process is None else process.returncode}) "
                    f"before answering: {self._tail()}")
            try:
                with urllib.request.urlopen(f"{self.api_url}/health", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(_POLL_S)
        raise OrchestratorUnavailable(f"the temporary Prefect server did not answer within "
                                      f"{limit:.0f} s: {self._tail()}")

    def _tail(self) -> str:
        try:
            self._log.seek(0)
            text = self._log.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return "(no output)"
        return " ".join(text.split())[-300:] or "(no output)"


def start() -> TemporaryServer | None:
    """An early temporary server, or None when ``PREFECT_API_URL`` is set (no server needed)."""
    if os.environ.get("PREFECT_API_URL"):
        return None
    try:
        return TemporaryServer()
    except OSError as exc:  # could not start the process: Prefect starts its own, as before
        log.warning("could not start the temporary Prefect server early: %s", exc)
        return None


def _die_with_parent():
    """A ``preexec_fn`` asking the kernel to SIGKILL the child when this process dies
    (Linux ``prctl(PR_SET_PDEATHSIG)``), or None where there is no such call.

    libc is loaded here, before the fork: the child only makes the one call. The parent is
    the thread that forks, so this must run on the main thread (``start`` does), which
    lives as long as the process.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def in_child() -> None:
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
        if os.getppid() != parent:  # the parent died between fork and prctl
            os._exit(1)
    return in_child


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
