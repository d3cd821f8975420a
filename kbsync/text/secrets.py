"""Secrets in a document's text: one table of detectors, run over the whole text.

Every text kbsync is about to index goes through :func:`find_secrets` first, whatever
the file's format or extension: the converted Markdown of a file (the ingest's convert
stage) and a text given to ``kbsync.api.add_text``. What a finding leads to (the file
refused as ``SecretDetected``, or its secrets replaced by ``[REDACTED:<kind>]``) is the
policy's (:class:`SecretPolicy`, ``KBSYNC_SECRETS``); this module only finds and redacts.

What it finds (the kinds of :data:`DETECTORS`, one compiled pattern each):

* private key blocks, in any case and anywhere in the text: PEM (``-----BEGIN RSA
  PRIVATE KEY-----``, PKCS#8, EC, DSA, encrypted), OpenSSH, PGP (``-----BEGIN PGP
  PRIVATE KEY BLOCK-----``), PuTTY key files, and a private key inside JSON (a Google
  service account's ``"private_key": "-----BEGIN ...``);
* token shapes: AWS access key ids, GitHub, GitLab, Slack, Stripe and Google API keys,
  Slack webhooks, and passwords inside URLs (``https://user:pass@host``);
* assignments (``NAME=value``, ``export NAME=value``, ``NAME: value`` in YAML, JSON
  ``"name": "value"``) to a name holding SECRET, PASSWORD, PASSWD, PASSPHRASE, TOKEN,
  API_KEY, ACCESS_KEY, PRIVATE_KEY, KEY_DATA or CREDENTIAL (any case), at the start of
  a line, with a one-word value that is not a placeholder (:func:`_plausible_value`).

Limits, on purpose (docs/SECURITY.md lists them): a key block needs a base64 body of
16 characters or more, so a documentation example with ``...`` as its body is not a
secret; an assignment must start its line and hold one word, so prose that talks about
passwords ("set PASSWORD=<your password>", "the token: see below") is never one; values
that are placeholders (``changeme``, ``xxx``, ``${VAR}``, ``<...>``, ``...``), paths,
URLs, numbers and bare words under 16 letters are not secrets. Missed, therefore: a
password of letters only, a secret in prose, in a table cell or a Kubernetes
``- name: X`` / ``value: Y`` pair, and every token shape not in the table.

Cost: about 22 ms per MB of text on one core (measured on 28 MB of /usr/share/doc,
docs/SECURITY.md), a small part of a conversion.

Tested by ``tests/text/test_secrets.py`` (each kind, and prose that must not match) and
``tests/ingest/test_secrets_ingest.py`` (through a real ingest).
"""

from __future__ import annotations

import bisect
import logging
import re
from dataclasses import dataclass
from enum import Enum
from typing import Callable, Iterator, Sequence

from kbsync.errors import SecretDetected

log = logging.getLogger(__name__)

DETECTOR_VERSION = "1"
"""Bump when the table finds more or less: it enters the document fingerprint, so every
stored document is screened once more by the new table on the next run."""


class SecretPolicy(str, Enum):
    """What a text holding a secret leads to (``KBSYNC_SECRETS``)."""

    REFUSE = "refuse"  # the document is not indexed: SecretDetected
    REDACT = "redact"  # each secret replaced by [REDACTED:<kind>], the document indexed


@dataclass(frozen=True)
class Finding:
    """One secret: its kind, its 1-based line, and the span of ``text`` to redact.

    Never holds the secret itself, so a finding may be logged or reported as is.
    """

    kind: str
    line: int
    start: int
    end: int


@dataclass(frozen=True)
class Detector:
    """A kind of secret and how to find it.

    Attributes:
        kind: the name reported (``SecretDetected`` messages, ``[REDACTED:<kind>]``).
        pattern: the regex; ``group`` names the part that is the secret (0: the match).
        accept: a check of that part (None: every match is a secret).
        hints: the pattern runs only on a text holding one of these strings (an exact
            substring search costs about 1 ms per MB; a regex scan 15-70).
        line_keywords: when set, the pattern is matched only on the lines holding one of
            these words (any ASCII case): for a line-anchored pattern whose words are
            common (``token``, ``password``), much cheaper than a scan of every line.
    """

    kind: str
    pattern: re.Pattern[str]
    group: int | str = 0
    accept: Callable[[str], bool] | None = None
    hints: tuple[str, ...] = ()
    line_keywords: tuple[bytes, ...] = ()


_B64_BODY = r"(?:[ \t]*(?:\\n|\r?\n))+(?:[A-Za-z-]+:[^\n]*(?:\\n|\r?\n)+)*[ \t]*[A-Za-z0-9+/=]{16}"
"""After a BEGIN line: line ends (real, or ``\\n`` escapes inside JSON), optional header
lines (``Proc-Type:``, ``Comment:``), then 16 base64 characters: a real key's body."""


def _key_block(label: str) -> str:
    """A BEGIN line of ``label`` (a regex), a key body, and everything up to its END line
    (or to the end of the text when it has none)."""
    return (rf"-----BEGIN {label}-----{_B64_BODY}"
            rf"(?:.*?-----END {label}-----|.*\Z)")


_PLACEHOLDERS = frozenset({
    "changeme", "change_me", "change-me", "changeit", "password", "passwd", "secret",
    "token", "example", "none", "null", "nil", "true", "false", "yes", "no", "on", "off",
    "redacted", "dummy", "test", "testing", "foo", "bar", "foobar", "todo", "fixme",
    "placeholder", "default", "required", "optional", "string", "value", "empty", "unset",
    "hidden", "sample", "your-token", "your_token", "mysecret", "mypassword", "secret123",
    "password123", "letmein", "hunter2", "qwerty", "abc123", "123456",
})
_PLACEHOLDER_PARTS = ("xxx", "***", "...", "your", "example", "placeholder", "changeme",
                      "redacted", "<", ">", "${", "$(", "{{", "}}", "%(", "%s")
_DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
_WORD_ONLY = re.compile(r"[A-Za-z_-]+")
_CODE_NAME = re.compile(r"_*(?:[a-z]+(?:_[a-z]+)+|[a-z]*(?:[A-Z][a-z]+){2,}|[A-Z]+(?:_[A-Z]+)+)")
"""A name in code, at any length: snake_case, CamelCase or UPPER_SNAKE, letters only
(``token=reservation_token,``, ``_token: AttributeEventToken``, ``total_tokens =
effective_max_concurrency``): found in real Python sources, never the shape of a random
secret (which holds digits or mixes case without word structure)."""


def _plausible_value(value: str) -> bool:
    """Whether an assigned value looks like a real secret rather than a placeholder, a
    reference to one (``$VAR``, ``${VAR}``, ``{{ var }}``), a path, a URL, a number, a
    word or a piece of code."""
    value = value.strip().strip("\"'`").rstrip(",;")
    lowered = value.lower()
    if len(value) < 8 or lowered in _PLACEHOLDERS:
        return False
    if value[0] in "$%@&*/~.\\" or "://" in value:  # a variable, a path, a URL
        return False
    if any(part in lowered for part in _PLACEHOLDER_PARTS):
        return False
    if value.isdigit() or set(lowered) <= {"x", "*", "-", "_", "0", "."}:
        return False
    if _WORD_ONLY.fullmatch(value) and len(value) < 16:  # a word or an identifier
        return False
    if _CODE_NAME.fullmatch(value) or " " in value:  # a name in code, or words of prose
        return False
    # code: self.token, os.environ["X"], get_password()
    return _DOTTED_NAME.fullmatch(value) is None and "(" not in value and "[" not in value


_SECRET_NAME = (r"[\w.-]*?(?:secret|passw(?:or)?d|passphrase|token|api[_-]?key|access[_-]?key"
                r"|private[_-]?key|key[_-]?data|credential)[\w.-]*")
_SECRET_WORDS = (b"secret", b"passw", b"passphrase", b"token", b"apikey", b"api_key", b"api-key",
                 b"access_key", b"access-key", b"accesskey", b"private_key", b"private-key",
                 b"privatekey", b"key_data", b"key-data", b"keydata", b"credential")
"""What :data:`_SECRET_NAME` holds, lowercase: locates the lines the assignment may be on."""
_ASSIGNMENT = re.compile(
    r"^[ \t]*(?:[#>*$-]+[ \t]*)?(?:export[ \t]+|set[ \t]+|setenv[ \t]+)?"
    rf"[\"']?(?P<name>{_SECRET_NAME})[\"']?[ \t]*(?::|=(?!=))[ \t]*"
    r"(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^\s#\"']+)[ \t]*[,;]?[ \t]*(?:#[^\n]*)?$",
    re.IGNORECASE | re.MULTILINE)


def _not_example(value: str) -> bool:
    return "example" not in value.lower()


_I = re.IGNORECASE
_IS = re.IGNORECASE | re.DOTALL

DETECTORS: tuple[Detector, ...] = (
    # Order matters only for overlaps: the earlier kind names a span both find.
    Detector("private-key-json", re.compile(
        r"\"private_key\"[ \t]*:[ \t]*(?P<key>\"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[^\"]{16,}\")",
        _I), group="key", hints=('"private_key"',)),
    Detector("pgp-private-key", re.compile(_key_block(r"PGP PRIVATE KEY BLOCK"), _IS)),
    Detector("openssh-private-key", re.compile(_key_block(r"OPENSSH PRIVATE KEY"), _IS)),
    Detector("pem-private-key", re.compile(_key_block(r"(?:[A-Z0-9]+ )*PRIVATE KEY"), _IS)),
    Detector("putty-private-key", re.compile(
        r"PuTTY-User-Key-File-\d+:[ \t]*\S+.*?(?:^Private-MAC:[^\n]*|\Z)",
        re.MULTILINE | re.DOTALL)),
    Detector("aws-access-key-id", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[A-Z0-9]{16}\b"),
             accept=_not_example, hints=("AKIA", "ASIA", "AGPA", "AIDA", "AROA")),
    Detector("github-token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_\w{60,})\b"),
             hints=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")),
    Detector("gitlab-token", re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"), hints=("glpat-",)),
    Detector("slack-token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), hints=("xox",)),
    Detector("slack-webhook", re.compile(
        r"https://hooks\.slack\.com/services/T[A-Z0-9]+/B[A-Z0-9]+/[A-Za-z0-9]{16,}")),
    Detector("stripe-key", re.compile(r"\b[sr]k_live_[A-Za-z0-9]{20,}"), hints=("k_live_",)),
    Detector("google-api-key", re.compile(r"\bAIza[A-Za-z0-9_-]{35}\b"), hints=("AIza",)),
    Detector("url-password", re.compile(r"://[^\s:/@\"'<>]+:(?P<password>[^\s:/@\"'<>]+)@"),
             group="password", accept=_plausible_value),
    Detector("secret-assignment", _ASSIGNMENT, group="value", accept=_plausible_value,
             line_keywords=_SECRET_WORDS),
)
"""The one table: every kind :func:`find_secrets` reports."""

REDACTED = "[REDACTED:{kind}]"
"""What replaces a secret under :attr:`SecretPolicy.REDACT`."""


def find_secrets(text: str) -> list[Finding]:
    """Every secret of ``text``, in order of position; overlapping findings are merged
    into the first one (a PEM key inside a JSON private key is one finding).

    Pure and bounded: each pattern scans the text once (linear in its length; a key
    block without an END line runs to the end of the text and is one finding).
    """
    spans: list[tuple[int, int, int, str]] = []  # (start, table order, end, kind)
    folded: list[bytes] = []  # the text in ASCII lowercase, made once if a detector needs it
    for order, detector in enumerate(DETECTORS):
        for match in _matches(detector, text, folded):
            value = match.group(detector.group)
            if value is None or (detector.accept is not None and not detector.accept(value)):
                continue
            start, end = match.span(detector.group)
            spans.append((start, order, end, detector.kind))
    if not spans:
        return []
    spans.sort()
    lines = _line_starts(text)
    findings: list[Finding] = []
    for start, _order, end, kind in spans:
        if findings and start < findings[-1].end:  # inside the previous finding
            last = findings[-1]
            findings[-1] = Finding(last.kind, last.line, last.start, max(last.end, end))
            continue
        findings.append(Finding(kind, bisect.bisect_right(lines, start), start, end))
    return findings


def redact(text: str, findings: list[Finding], offsets: Sequence[int] = ()) -> tuple[str, list[int]]:
    """``text`` with each finding's span replaced by ``[REDACTED:<kind>]``, and ``offsets``
    (strictly increasing positions in ``text``: a PDF's page starts) moved to match.

    ``findings`` as :func:`find_secrets` returns them (ordered, not overlapping). A span
    that crosses an offset is cut there and each piece gets its own marker, so the moved
    offsets stay strictly increasing and each page keeps a marker of its own.
    """
    pieces: list[tuple[int, int, str]] = []
    for finding in findings:
        start = finding.start
        for cut in offsets[bisect.bisect_right(offsets, finding.start):
                           bisect.bisect_left(offsets, finding.end)]:
            pieces.append((start, cut, finding.kind))
            start = cut
        pieces.append((start, finding.end, finding.kind))
    parts: list[str] = []
    moved: list[int] = []
    at, shift, pending = 0, 0, 0  # shift: output length minus input length so far
    for start, end, kind in pieces:
        parts.append(text[at:start])
        marker = REDACTED.format(kind=kind)
        parts.append(marker)
        while pending < len(offsets) and offsets[pending] <= start:
            moved.append(offsets[pending] + shift)
            pending += 1
        shift += len(marker) - (end - start)
        at = end
    parts.append(text[at:])
    moved.extend(offset + shift for offset in offsets[pending:])
    return "".join(parts), moved


def screen(text: str, *, name: str, policy: SecretPolicy,
           offsets: Sequence[int] = ()) -> tuple[str, list[int]]:
    """The text to index in place of ``text``, and its ``offsets`` (see :func:`redact`):
    ``text`` itself when it holds no secret, else redacted (``policy`` REDACT, with one
    warning naming ``name``, the kinds and lines).

    Raises:
        SecretDetected: ``text`` holds a secret and ``policy`` is REFUSE; the message
            names ``name``, each kind and its line, never the secret.
    """
    findings = find_secrets(text)
    if not findings:
        return text, list(offsets)
    if policy is SecretPolicy.REFUSE:
        raise SecretDetected(f"{name}: holds a secret ({describe(findings)}); not indexed: "
                             "remove it, exclude the file, or set KBSYNC_SECRETS=redact")
    log.warning("%s: %d secret(s) redacted before indexing (%s)", name, len(findings),
                describe(findings))
    return redact(text, findings, offsets)


def describe(findings: list[Finding], *, limit: int = 5) -> str:
    """``pem-private-key at line 12, secret-assignment at line 40`` (the first ``limit``),
    never the secret itself."""
    shown = ", ".join(f"{f.kind} at line {f.line}" for f in findings[:limit])
    more = f" (and {len(findings) - limit} more)" if len(findings) > limit else ""
    return shown + more


def _matches(detector: Detector, text: str, folded: list[bytes]) -> Iterator[re.Match[str]]:
    """The matches of ``detector`` in ``text``, scanning only where its hints allow."""
    if detector.hints and not any(hint in text for hint in detector.hints):
        return
    if not detector.line_keywords:
        yield from detector.pattern.finditer(text)
        return
    if not folded:
        # one byte per character ("?" for non-ASCII), so offsets are the text's own
        folded.append(text.encode("ascii", "replace").lower())
    for start, end in _lines_holding(folded[0], detector.line_keywords):
        match = detector.pattern.match(text, start, end)
        if match is not None:
            yield match


def _lines_holding(folded: bytes, words: tuple[bytes, ...]) -> list[tuple[int, int]]:
    """The (start, end) of each line of ``folded`` holding one of ``words``, in order."""
    lines: set[tuple[int, int]] = set()
    for word in words:
        at = folded.find(word)
        while at != -1:
            start = folded.rfind(b"\n", 0, at) + 1
            end = folded.find(b"\n", at)
            end = len(folded) if end == -1 else end
            lines.add((start, end))
            at = folded.find(word, end)
    return sorted(lines)


def _line_starts(text: str) -> list[int]:
    """Offsets of each line's first character (line 1 starts at 0)."""
    starts = [0]
    at = text.find("\n")
    while at != -1:
        starts.append(at + 1)
        at = text.find("\n", at + 1)
    return starts
