"""Flatten HTML nested past a depth limit, keeping its text.

``html_to_markdown`` stops at 512 levels of tree repair and 1024 of traversal: whatever lies
deeper is skipped. A page of 200,000 nested ``<div>`` elements (generated, or made to hurt)
then loses all the text below level 1024, and comes out empty when all its text is down
there. :func:`flatten_deep` drops the tags below :data:`MAX_DEPTH` and keeps everything
between them, so that text is converted (as one flat run) and only the structure is cut.

The depth is counted on the tag stream, not by a full parser: an open tag of an element
that has an end tag counts one level, its end tag (or the next unbalanced end tag) takes
it back. Void elements (``<br>``, ``<img>``...), self-closed tags and elements whose end tag
HTML lets a page omit (``<p>``, ``<li>``, ``<td>``...) are not counted, so a page of many
unclosed paragraphs is never flattened. Comments, ``<script>``, ``<style>``, ``<textarea>``
and ``<title>`` contents are passed through untouched.

Invariant: the output holds every character of the input outside the dropped tags.
"""

from __future__ import annotations

import re

MAX_DEPTH = 256
"""Tags below this many counted levels are dropped (well inside the library's 512 and 1024,
which also count the elements this count leaves out)."""

_TOKEN = re.compile(
    r"<!--.*?(?:-->|\Z)"  # a comment (an unclosed one runs to the end, as in browsers)
    r"|<(script|style|textarea|title)\b[^>]*>.*?(?:</\1\s*>|\Z)"  # raw text: not markup
    r"|<(/?)([A-Za-z][A-Za-z0-9:-]*)((?:[^>\"']|\"[^\"]*\"|'[^']*')*)>",
    re.S | re.I)
# Elements without an end tag, or whose end tag may be omitted: never counted.
_UNCOUNTED = frozenset({
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track",
    "wbr", "param", "keygen", "frame", "basefont", "isindex",
    "p", "li", "dt", "dd", "option", "optgroup", "tr", "td", "th", "thead", "tbody", "tfoot",
    "colgroup", "caption", "rb", "rt", "rtc", "rp", "html", "head", "body",
})


def flatten_deep(text: str, limit: int = MAX_DEPTH) -> tuple[str, int]:
    """``text`` without the tags nested below ``limit`` counted levels.

    Returns:
        (the flattened text, the deepest counted level of the input). Tags at or above
        ``limit`` and all text stay as they were; an end tag is dropped exactly when it
        closes a dropped open tag.
    """
    out: list[str] = []
    pos = depth = deepest = 0
    for match in _TOKEN.finditer(text):
        step = _step(match)
        if step == 0:
            continue
        if step > 0:
            depth += 1
            deepest = max(deepest, depth)
            drop = depth > limit
        else:
            drop = depth > limit
            depth = max(depth - 1, 0)
        if drop:
            out.append(text[pos:match.start()])
            out.append(" ")  # the tag separated words; keep them apart
            pos = match.end()
    out.append(text[pos:])
    return "".join(out), deepest


def _step(match: re.Match[str]) -> int:
    """+1 for a counted open tag, -1 for a counted end tag, 0 for anything else."""
    name = match.group(3)
    if name is None or name.lower() in _UNCOUNTED:
        return 0
    if match.group(2):
        return -1
    return 0 if match.group(4).rstrip().endswith("/") else 1
