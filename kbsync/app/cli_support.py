"""What every ``kbsync`` command shares: one-line usage errors, settings read from the
environment, logging on stderr, and the JSON object of a failed command.

Invariants the CLI keeps with these helpers:

- a usage or configuration error is one line naming the argument or variable and
  the reason, and exits 2; no traceback reaches the terminal without ``-v``;
- with ``--json``, stdout holds exactly one JSON object on every exit path
  (:func:`emit` refuses a second one), ``{"error": {"kind", "message"}}`` on failure
  (``kind`` an :class:`~kbsync.errors.ErrorCode`; plus ``retry_after`` in seconds
  when the server of a transient failure asked for a wait);
- without ``-v`` the terminal shows kbsync's own warnings and other libraries'
  errors, one line each; Prefect's engine logs (which repeat a failed run's
  exception with its traceback) stay in the Prefect UI; ``-v`` shows everything.
"""

from __future__ import annotations

import argparse
import difflib
import json
import logging
import math
import os
import re
import sys
from typing import NoReturn, Sequence
from urllib.parse import urlsplit, urlunsplit

from kbsync.app.terminal import TerminalSafeFormatter, json_terminal_safe, terminal_safe
from kbsync.errors import ErrorCode, KbsyncError, RunEndedFailed, StoreUnavailable, UsageError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_PARTIAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
NAMESPACE_MAX = 200  # the ingest flow's parameter schema allows 1..200 characters

_emitted = False


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are a :class:`UsageError` (one line) instead of usage + exit.

    ``add_subparsers`` makes subparsers of the same class, so every subcommand's
    errors come here too.
    """

    def error(self, message: str) -> NoReturn:
        """Raise instead of printing the usage block and exiting (with "did you mean" for a
        misspelt subcommand)."""
        choice = _INVALID_CHOICE.search(message)
        if choice:
            choices = [c.strip().strip("'\"") for c in choice.group(2).split(",")]
            message += _did_you_mean(choice.group(1), choices)
        raise UsageError(f"{message} (see `{self.prog} --help`)")

    def parse_args(self, args=None, namespace=None):
        """argparse's, but an unknown option is named with the closest options of the
        subcommand given ("did you mean --namespace?") and that subcommand's ``--help``.

        Abbreviations stay allowed (argparse's ``allow_abbrev``): a prefix of one option is
        that option, a prefix of several is refused naming them all."""
        parsed, extras = self.parse_known_args(args, namespace)
        if not extras:
            return parsed
        parser = self._chosen(parsed)
        options = [o for action in parser._actions for o in action.option_strings]
        hints = "".join(_did_you_mean(e.split("=", 1)[0], options)
                        for e in extras if e.startswith("-"))
        parser.error(f"unrecognized arguments: {' '.join(extras)}{hints}")

    def _chosen(self, parsed: argparse.Namespace) -> argparse.ArgumentParser:
        """The subcommand's parser ``parsed`` went through (this one when there is none)."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                return action.choices.get(getattr(parsed, action.dest, None) or "", self)
        return self


_INVALID_CHOICE = re.compile(r"invalid choice: '?([^'\s]*)'? \(choose from (.*)\)")


def _did_you_mean(given: str, candidates: Sequence[str]) -> str:
    """`` (did you mean X?)`` naming the closest of ``candidates`` to ``given``, or ``""``."""
    close = difflib.get_close_matches(given, candidates, n=2, cutoff=0.6)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


# -- argument types -------------------------------------------------------------------------
def text_argument(text: str) -> str:
    """A QUERY or QUESTION: not blank."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def fraction_argument(text: str) -> float:
    """argparse type: a number in [0, 1] (``--max-drop``, ``--max-delete-fraction``)."""
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError("must be between 0 and 1")
    return value


def namespace_argument(text: str) -> str:
    """A namespace: 1..200 characters, not blank."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    if len(text) > NAMESPACE_MAX:
        raise argparse.ArgumentTypeError(f"must be at most {NAMESPACE_MAX} characters")
    return text


def score_argument(text: str) -> float:
    """A score threshold: a finite number (``nan`` would silently drop every hit)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, not {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, not {text!r}")
    return value


def k_argument(text: str) -> int:
    """A result count ``-k``: an integer from 1 to 100."""
    value = int(text)
    if not 1 <= value <= 100:
        raise argparse.ArgumentTypeError("must be between 1 and 100")
    return value


# -- logging --------------------------------------------------------------------------------
class OneLineFormatter(logging.Formatter):
    """``LEVEL logger: message`` on one line, without the traceback."""

    def format(self, record: logging.LogRecord) -> str:
        """The record's first line (newlines joined), never its exc_info."""
        message = " ".join(record.getMessage().split("\n")).strip()
        return terminal_safe(f"{record.levelname} {record.name}: {message}", one_line=True)


class PersonFilter(logging.Filter):
    """What a person at the terminal reads without ``-v``."""

    def filter(self, record: logging.LogRecord) -> bool:
        """kbsync's warnings, other libraries' errors, and none of Prefect's engine logs."""
        name = record.name
        if name == "kbsync" or name.startswith("kbsync."):
            return record.levelno >= logging.WARNING
        if name == "prefect" or name.startswith("prefect."):
            return False  # the CLI reports the run's outcome itself, in one line
        return record.levelno >= logging.ERROR


def setup_logging(verbose: bool) -> None:
    """Log on stderr: everything with tracebacks under ``-v``, else one line per record.

    Call before Prefect is imported: Prefect then keeps this root handler instead
    of installing its own console handler.
    """
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "kbsync_console", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.kbsync_console = True  # type: ignore[attr-defined]
    if verbose:
        handler.setFormatter(TerminalSafeFormatter("%(levelname)s %(name)s: %(message)s"))
        root.setLevel(logging.DEBUG)
    else:
        handler.setFormatter(OneLineFormatter())
        handler.addFilter(PersonFilter())
        root.setLevel(logging.WARNING)
        # Prefect's internal logger has its own stderr handler (tracebacks included).
        os.environ.setdefault("PREFECT_INTERNAL_LOGGING_LEVEL", "CRITICAL")
    root.addHandler(handler)
    # Core modules log through `logging`; let Prefect forward them to the run's logs.
    os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "kbsync")
    # ... and outside a flow (search, remove) let them stay local without a warning each.
    os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
    # Without PREFECT_API_URL Prefect starts a temporary server; on 2 cores it can take
    # over 20 s (its default limit), so allow more before calling the run failed.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # no network here


# -- outcome --------------------------------------------------------------------------------
def classify(exc: BaseException, settings=None) -> tuple[int, ErrorCode, str]:
    """``(exit code, kind, one-line message)`` of an exception that ended a command."""
    if isinstance(exc, KeyboardInterrupt):
        signum = getattr(exc, "signum", None)  # cli_signals.Terminated: SIGTERM, SIGHUP
        if signum is not None:
            return 128 + signum, ErrorCode.Interrupted, str(exc)
        return EXIT_INTERRUPTED, ErrorCode.Interrupted, "interrupted"
    if isinstance(exc, UsageError):
        return EXIT_USAGE, exc.kind, one_line(str(exc))
    if isinstance(exc, KbsyncError):
        message = one_line(str(exc))
        url = getattr(settings, "qdrant_url", None)
        if isinstance(exc, StoreUnavailable) and url and url not in message:
            message += f" (KBSYNC_QDRANT_URL={safe_url(url)})"
        return EXIT_FAILED, exc.kind, message
    if unreachable_prefect_api(exc):
        url = safe_url(os.environ.get("PREFECT_API_URL", ""))
        return EXIT_FAILED, ErrorCode.OrchestratorUnavailable, (
            f"cannot reach the Prefect API at PREFECT_API_URL={url}: start that server, "
            "or unset PREFECT_API_URL to run without one")
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return EXIT_FAILED, ErrorCode.InternalError, f"{type(exc).__name__}: {first}".rstrip(": ")


def unreachable_prefect_api(exc: BaseException) -> bool:
    """Whether ``exc`` is Prefect's refusal to start a run against a ``PREFECT_API_URL``
    that does not answer. Prefect 3 raises a bare ``RuntimeError("Failed to reach API at
    URL")`` for it (``prefect._internal.version_checking``), so it is known by that text."""
    return (type(exc) is RuntimeError and str(exc).startswith("Failed to reach API at")
            and bool(os.environ.get("PREFECT_API_URL")))


def is_engine_panic(exc: BaseException) -> bool:
    """Whether ``exc`` is a Rust engine's panic, known by its type's name as
    :func:`kbsync.store.validate.is_engine_panic` does (not imported: ``--help`` and every
    ``SystemExit`` pass here, and must not load the store)."""
    return type(exc).__name__ == "PanicException"


def panic_error(exc: BaseException) -> KbsyncError:
    """The one-line error a panic that escaped the store adapter ends the command with (the
    adapters translate the engine calls they wrap; this is the net under the others)."""
    from kbsync.errors import StoreDamaged

    return StoreDamaged(f"the store engine panicked ({one_line(str(exc))[:300] or 'no message'}); "
                        "its files are probably damaged: `kbsync verify` names the damage, "
                        "`kbsync verify --repair` rebuilds it")


def one_line(text: str) -> str:
    """``text`` with its lines joined by spaces."""
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def safe_url(url: str) -> str:
    """``url`` without any user:password part."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    if parts.username or parts.password:
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        parts = parts._replace(netloc=netloc)
    return urlunsplit(parts)


def print_error(code: int, kind: str, message: str) -> None:
    """The one line a person reads on stderr."""
    prefix = "error" if code == EXIT_USAGE else kind
    print(f"kbsync: {prefix}: {terminal_safe(message, one_line=True)}", file=sys.stderr,
          flush=True)


def error_object(kind: ErrorCode, message: str, fields: dict | None = None, *,
                 retry_after: float | None = None) -> dict:
    """The JSON object of a failed command: ``fields`` (e.g. ingest's counts) plus ``error``.

    ``error.retry_after`` (seconds) is there only when the failure carried one.
    """
    error: dict = {"kind": str(kind), "message": message}
    if retry_after is not None:
        error["retry_after"] = retry_after
    return {**(fields or {}), "error": error}


def emit(obj: dict) -> None:
    """Write ``obj`` as the command's one JSON object on stdout (at most once per process)."""
    global _emitted
    if _emitted:
        logging.getLogger(__name__).debug("a second JSON object was not printed: %s", obj)
        return
    _emitted = True
    sys.stdout.write(json_terminal_safe(json.dumps(obj, ensure_ascii=False)) + "\n")
    sys.stdout.flush()


def emitted() -> bool:
    """Whether :func:`emit` already printed this process's object."""
    return _emitted


def reset_emitted() -> None:
    """Forget a printed object (``main`` runs once per process, tests call it repeatedly)."""
    global _emitted
    _emitted = False


def run_result(outcome) -> dict:
    """A flow's JSON result: returned, or carried by the exception of a run that ended
    Failed after doing its work (:class:`~kbsync.errors.RunEndedFailed`).

    Raises:
        BaseException: the flow's own error when it failed before a result existed.
    """
    if isinstance(outcome, dict):
        return outcome
    if isinstance(outcome, RunEndedFailed):
        return outcome.result
    raise _as_kbsync_error(outcome)


def _as_kbsync_error(error) -> BaseException:
    # A failed flow's state holds its exception: raise that one (main names its kind).
    if isinstance(error, BaseException):
        return error
    return KbsyncError(f"run failed: {error}")


# -- reading an index that may not exist ---------------------------------------------------
def indexed_store(settings, namespace: str | None = None, *, named: bool = False):
    """The store, opened for reading, when it holds something to read; else ``None``.

    ``None`` when the collection does not exist (or ``namespace``, when given,
    holds no point). On the embedded engine the collection's folder is looked
    for first, so a missing store is neither opened nor created: reading never
    makes folders. The caller closes the returned store.

    Raises:
        UsageError: with ``named`` (a namespace a person typed), ``namespace`` holds no
            point while the store holds other namespaces (:func:`check_namespace`).
    """
    from kbsync.store import open_store
    from kbsync.store.base import Filter

    if not settings.qdrant_url:
        from kbsync.store.edge.query import CONFIG_FILE

        if not (settings.store_path / settings.collection / CONFIG_FILE).is_file():
            return None
    store = open_store(settings)
    try:
        empty = store.collection_dimension(settings.collection) is None or (
            namespace is not None
            and store.count(settings.collection, Filter.where(namespace=namespace)) == 0)
        if empty and named and namespace is not None:
            check_namespace(store, settings, namespace)
    except BaseException:
        store.close()
        raise
    if empty:
        store.close()
        return None
    return store


def check_namespace(store, settings, namespace: str) -> None:
    """Refuse a ``--namespace`` the store does not hold while it holds others (a misspelt
    name): one line naming those that exist. A store that holds no namespace passes (its
    readers answer that nothing is indexed yet).

    Raises:
        UsageError: ``namespace`` has no document and others have.
    """
    from kbsync.catalog.state import StateStore

    known = sorted(StateStore(store, settings.state_collection).namespaces())
    if known and namespace not in known:
        raise UsageError(f"namespace {namespace!r} holds nothing in collection "
                         f"{settings.collection!r}; its namespaces: {', '.join(known)}")


def nothing_indexed(settings, namespace: str | None = None) -> str:
    """The answer of a read on an empty or missing store (names where it looked)."""
    where = (f"on {safe_url(settings.qdrant_url)}" if settings.qdrant_url
             else f"under {os.path.abspath(settings.store_path)}")
    if not settings.qdrant_url and not settings.home.is_absolute():
        # ./.kbsync follows the working folder: a shell elsewhere sees another (empty) home
        where += f" (KBSYNC_HOME={settings.home} is relative to the working folder)"
    what = f"namespace {namespace!r} of collection" if namespace is not None else "collection"
    return (f"nothing is indexed yet in {what} {settings.collection!r} {where}: "
            "run `kbsync ingest ROOT` first")
