"""A refusal stops a run once: one ERROR line, on the flow, and no red task or subflow.

A refusal (``RootConflict``, ``MassDeleteRefused``, ``EmbedderMismatch``, ...) raised
through a task, a subflow and the flow was logged by each of Prefect's engines: "Task run
failed with exception: RootConflict('...')", the task's "Finished in state Failed(...)"
(both ERROR), the flow's "Encountered exception during execution: RootConflict('...')"
(ERROR) and its closing state line (INFO), in Python repr form. Here:

- a task whose step refused ends ``Completed`` named ``Refused`` (:func:`refused`), its
  error carried in a :class:`Stopped` that the executor raises again in the flow
  (:func:`unwrap`);
- an ``ingest-root`` subflow that stopped on one ends ``Completed`` named ``Stopped``
  the same way, so its failure shows once, on its parent;
- the flow logs :func:`refusal_line` once at ERROR and returns a Failed state carrying
  the error (the CLI raises it: one line, its exit code).

Only refusals are turned into values: an outage a retry may heal
(:class:`~kbsync.errors.TransientError`) and any bug still raise, as before.
"""

from __future__ import annotations

from typing import Any

from prefect.states import Completed, State

from kbsync.errors import KbsyncError, MassDeleteRefused, TransientError
from tasks.logs import expected_end
from tasks.run_story import escape_controls


class Stopped:
    """The refusal a task or a subflow ended on, carried as its result."""

    __slots__ = ("error",)

    def __init__(self, error: KbsyncError) -> None:
        self.error = error


def is_refusal(exc: BaseException) -> bool:
    """An error kbsync raises on purpose to stop a run that no retry can heal."""
    return expected_end(exc) and not isinstance(exc, TransientError)


def refusal_line(exc: BaseException) -> str:
    """``KIND: message``, one line, control characters escaped."""
    kind = getattr(exc, "kind", type(exc).__name__)
    return escape_controls(" ".join(f"{kind}: {exc}".split()))


def refused(exc: BaseException, name: str = "Refused") -> State:
    """The state of a task (or subflow) that ``exc`` refused: ``Completed`` named ``name``,
    with the one-line message; re-raises anything that is not a refusal."""
    if not is_refusal(exc):
        raise exc
    return Completed(data=Stopped(exc), name=name,  # type: ignore[arg-type]
                     message=refusal_line(exc))


def unwrap(value: Any) -> Any:
    """``value``, or the refusal it carries raised again. A task called directly that
    returned a state hands back that state: its data is the value."""
    if isinstance(value, State) and value.is_completed():
        value = value.result()
    if isinstance(value, Stopped):
        raise value.error
    return value


FORM_WORDS = (("pass --allow-mass-delete or raise --max-delete-fraction",
               "set allow_mass_delete (a parameter of the run form) or raise "
               "max_delete_fraction"),
              ("or pass --allow-mass-delete", "or run again with allow_mass_delete set (a "
               "parameter of the run form)"),
              ("--allow-mass-delete", "allow_mass_delete"),
              ("--max-delete-fraction", "max_delete_fraction"))
"""The CLI's flags in ``MassDeleteRefused`` messages, and the words a deployment run's
operator needs: the run form's parameters."""


def in_form_words(exc: KbsyncError) -> KbsyncError:
    """``exc`` as a deployment run's operator reads it: a ``MassDeleteRefused`` names the
    form parameters (``allow_mass_delete``) instead of the CLI's flags; any other error is
    returned as it is."""
    if not isinstance(exc, MassDeleteRefused):
        return exc
    text = str(exc)
    for flag, form in FORM_WORDS:
        text = text.replace(flag, form)
    reworded = MassDeleteRefused(text)
    reworded.__cause__ = exc.__cause__
    return reworded


def deployment_run() -> bool:
    """True when the current flow run belongs to a deployment (a worker's or ``serve``'s
    run, started from the UI, a schedule or ``prefect deployment run``); False for the CLI
    and plain calls."""
    from prefect.runtime import deployment

    try:
        return bool(deployment.get_id())
    except Exception:  # noqa: BLE001 - no API to ask: not a deployment run we can tell
        return False
