"""What the CLI writes to a terminal carries no control characters of other people's (issue 22).

File names, headings and document texts come from whoever can write to a share:
a name like ``esc\\x1b[31mred.md`` printed raw would drive the reader's terminal
(colours, cursor moves, a fake prompt, OSC sequences; ``\\r`` overwrites a line,
bidi overrides reorder it). :func:`terminal_safe` is the one sanitizer: every
such character is shown as a visible escape (``\\x1b``, ``\\u202e``), so the
name stays recognisable and nothing reaches the terminal as a control.

Where it is applied (the printing boundary, nothing upstream changes): the rich
consoles of :mod:`kbsync.app.console` (a render hook, so tables and every
``print`` are covered), the one-line error of ``cli_support.print_error``, and
the log formatters of the CLI's stderr handler. JSON output stays exact:
``json.dumps`` escapes C0 and DEL already, and :func:`json_terminal_safe`
writes the rest (C1, bidi) as ``\\uXXXX``, the same JSON value.
"""

from __future__ import annotations

import logging
import re

_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"  # marks, embeddings, overrides, isolates
_LINE_BREAKS = "\u2028\u2029"
_UNSAFE = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}{_LINE_BREAKS}]")
_UNSAFE_ONE_LINE = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}{_LINE_BREAKS}]")
_UNSAFE_IN_JSON = re.compile(f"[\x7f-\x9f{_BIDI}{_LINE_BREAKS}]")  # json.dumps escapes C0


def _visible(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: str, *, one_line: bool = False) -> str:
    """``text`` with every control character written as a visible escape.

    Kept as they are: newlines and tabs (body text, tables, tracebacks), unless
    ``one_line`` (a name or an error line, where a newline could forge a line of
    output of its own). Printable text, including any non-Latin script, is unchanged.
    """
    pattern = _UNSAFE_ONE_LINE if one_line else _UNSAFE
    return pattern.sub(_visible, text)


def json_terminal_safe(encoded: str) -> str:
    """JSON text (from ``json.dumps``) with C1 and bidi characters as ``\\uXXXX``: the
    same value for any JSON reader, and nothing a terminal would act on."""
    return _UNSAFE_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", encoded)


class TerminalSafeFormatter(logging.Formatter):
    """A ``logging.Formatter`` whose output passes :func:`terminal_safe` (tracebacks keep
    their lines)."""

    def format(self, record: logging.LogRecord) -> str:
        """The formatted record, control characters escaped."""
        return terminal_safe(super().format(record))
