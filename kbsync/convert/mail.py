"""E-mail messages (``.eml``, RFC 5322) to Markdown with the standard library's ``email``.

The subject becomes the title, From/To/Cc/Date a short header block, then the body: the
``text/plain`` part when there is one, else the ``text/html`` part through
:mod:`kbsync.convert.html`. A forwarded message (a ``message/rfc822`` part) follows as a
``## Forwarded message`` section with its own headers, body and forwards, down to
:data:`MAX_FORWARD_DEPTH` levels (deeper ones are named and a warning says so). Other
attachments are named, not converted (each would be a document of its own; save it beside
the message to index it).

Nothing is lost silently, nothing unreadable becomes text:

- a ``multipart`` body whose boundary is missing or wrong is read again with the boundary
  its first ``--`` line gives, else as plain text; a warning says which;
- a declared charset that is unknown, not a text encoding, or not ASCII-compatible (a mail
  body's charset is; ``utf-16`` on ASCII bytes would read as CJK) is replaced by the text
  converter's detection, with a warning;
- damaged base64 is decoded as far as it goes, with a warning, when the result is text;
  when it is not, the message fails with one :class:`~kbsync.errors.CorruptDocument` line
  (its previous version stays indexed).
"""

from __future__ import annotations

import base64
import codecs
import email
import email.errors
import email.policy
import re
from email.message import EmailMessage, Message

from kbsync.convert.html import convert_html
from kbsync.convert.text import Extracted, decode_text, normalize_newlines
from kbsync.errors import CorruptDocument

MAX_FORWARD_DEPTH = 16
"""Forwarded messages indexed below the top one; deeper ones are named, not read."""
_HEADERS = ("From", "To", "Cc", "Date")
_BASE64_DEFECTS = (email.errors.InvalidBase64CharactersDefect,
                   email.errors.InvalidBase64PaddingDefect,
                   email.errors.InvalidBase64LengthDefect)
_LOST_BOUNDARY = (email.errors.NoBoundaryInMultipartDefect,
                  email.errors.StartBoundaryNotFoundDefect)
# RFC 2046 boundary: 1-70 of these characters, not ending in a space
_BOUNDARY_LINE = re.compile(rb"^--([0-9A-Za-z'()+_,\-./:=? ]{0,69}[0-9A-Za-z'()+_,\-./:=?])[ \t]*\r?$",
                            re.MULTILINE)


def convert_eml(data: bytes, *, name: str) -> Extracted:
    """Convert one message, its forwarded messages included.

    Raises:
        CorruptDocument: the bytes hold no message header at all, messages nested past
            what the parser can follow, or a body whose damaged base64 gives no text.
    """
    try:
        message = email.message_from_bytes(data, policy=email.policy.default)
    except RecursionError:
        raise CorruptDocument(f"{name}: messages nested too deeply to parse") from None
    assert isinstance(message, EmailMessage)  # the default policy's message class
    if not message.keys():
        raise CorruptDocument(f"{name}: not an e-mail message (no header)")
    reader = _Reader(name)
    subject = _header(message, "Subject")
    lines = [f"# {subject}", ""] if subject else []
    lines += reader.message(message, depth=0)
    markdown = "\n".join(lines).strip("\n")
    return Extracted(markdown, "email", "email", warnings=reader.warnings,
                     title_hint=subject or None)


class _Reader:
    """One message's conversion: its warnings, gathered over the forwarded messages."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.warnings: list[str] = []

    def message(self, message: EmailMessage, *, depth: int) -> list[str]:
        """Header block, body, forwarded messages and named attachments of ``message``."""
        lines = [f"**{key}:** {value}  " for key in _HEADERS if (value := _header(message, key))]
        source = self._with_parts(message)
        lines += ["", self._body(source)] if source is not None else ["", self._raw_body(message)]
        named: list[str] = []
        for part in source.iter_attachments() if source is not None else ():
            if part.get_content_type() == "message/rfc822":
                lines += self._forwarded(part, depth + 1, named)
            else:
                named.append(part.get_filename() or part.get_content_type())
        if named:
            lines += ["", f"Attachments (not indexed): {', '.join(named)}"]
        return lines

    def _forwarded(self, part: Message, depth: int, named: list[str]) -> list[str]:
        inner = _inner_message(part)
        subject = _header(inner, "Subject") if inner is not None else ""
        if inner is None or depth > MAX_FORWARD_DEPTH:
            named.append(f"forwarded message {subject!r}" if subject else "message/rfc822")
            deep = (f"forwarded messages nested deeper than {MAX_FORWARD_DEPTH} levels were "
                    "not indexed (named among the attachments)")
            if depth > MAX_FORWARD_DEPTH and deep not in self.warnings:
                self.warnings.append(deep)
            return []
        return ["", f"## Forwarded message: {subject or '(no subject)'}", "",
                *self.message(inner, depth=depth)]

    def _with_parts(self, message: EmailMessage) -> EmailMessage | None:
        """``message``, or for a multipart one whose boundary is lost, the same body read
        with the boundary its first ``--`` line gives; ``None``: read it as plain text."""
        if message.get_content_maintype() != "multipart" or message.is_multipart():
            return message
        raw = _raw_payload(message)
        found = _BOUNDARY_LINE.search(raw)
        if found is not None:
            header = (f"Content-Type: {message.get_content_type()}; "
                      f"boundary=\"{found.group(1).decode('ascii')}\"\r\n\r\n").encode("ascii")
            again = email.message_from_bytes(header + raw, policy=email.policy.default)
            if again.is_multipart() and not any(isinstance(d, _LOST_BOUNDARY)
                                                 for d in again.defects):
                self.warnings.append("multipart body without its declared boundary; read "
                                     "with the boundary its first '--' line gives")
                return again
        self.warnings.append("multipart body without a usable boundary; read as plain text")
        return None

    def _raw_body(self, message: Message) -> str:
        return normalize_newlines(self._text(_raw_payload(message), None, "body"))

    def _body(self, message: EmailMessage) -> str:
        part = message.get_body(preferencelist=("plain", "html"))
        if part is None:
            return ""
        payload = part.get_payload(decode=True)
        # decode=True gives the transfer-decoded bytes of a leaf part (None when absent)
        raw = payload if isinstance(payload, bytes) else b""
        where = f"{part.get_content_type()} body"
        broken = sorted({type(d).__name__ for d in part.defects if isinstance(d, _BASE64_DEFECTS)})
        if "InvalidBase64LengthDefect" in broken:  # the parser handed back the base64 itself
            raw = _base64_as_far_as_it_goes(raw)
        text = self._text(raw, part.get_content_charset(), where,
                          damage=f"damaged base64: {', '.join(broken)}" if broken else "")
        if broken:
            self.warnings.append(f"{where}: damaged base64 ({', '.join(broken)}); decoded as "
                                 "far as it goes")
        if part.get_content_subtype() == "html":
            return convert_html(text.encode("utf-8"), name=self.name).markdown
        return normalize_newlines(text)

    def _text(self, raw: bytes, charset: str | None, where: str, *, damage: str = "") -> str:
        """``raw`` in its declared charset when that reads as text, else as detected.

        Raises:
            CorruptDocument: no decoding gives text (binary, or base64 gone wrong).
        """
        usable = _mail_charset(charset) if charset else None
        if usable is not None:
            try:
                text = raw.decode(usable)
            except UnicodeDecodeError:
                text = None
            if text is not None and _reads_as_text(text):
                return text
        if charset:
            self.warnings.append(f"{where}: not readable as its declared charset {charset!r}; "
                                 "its encoding was detected instead")
        try:
            text, _encoding, more = decode_text(raw, self.name)
        except CorruptDocument as exc:
            raise CorruptDocument(f"{self.name}: the {where} is not text"
                                  f"{f' ({damage})' if damage else ''}") from exc
        if not _reads_as_text(text):
            raise CorruptDocument(f"{self.name}: the {where} does not decode to text"
                                  f"{f' ({damage})' if damage else ''}")
        self.warnings.extend(more)
        return text


def _header(message: Message, key: str) -> str:
    try:
        value = message.get(key)
    except (ValueError, IndexError, TypeError):  # a malformed header: shown raw below
        value = message.get_all(key, failobj=[""])[0] if key in message else ""
    return " ".join(str(value or "").split())


def _inner_message(part: Message) -> EmailMessage | None:
    """The message a ``message/rfc822`` part holds (parsed again when it came as text)."""
    payload = part.get_payload()
    if isinstance(payload, list):
        return payload[0] if payload and isinstance(payload[0], EmailMessage) else None
    raw = part.get_payload(decode=True)
    if not isinstance(raw, bytes) or not raw.strip():
        return None
    inner = email.message_from_bytes(raw, policy=email.policy.default)
    return inner if inner.keys() else None


def _base64_as_far_as_it_goes(encoded: bytes) -> bytes:
    """The whole 4-character groups of the base64 alphabet in ``encoded``, decoded (what
    the parser gives up on when the count of characters is not a multiple of 4)."""
    alphabet = re.sub(rb"[^A-Za-z0-9+/]", b"", encoded)
    return base64.b64decode(alphabet[:len(alphabet) - len(alphabet) % 4])


def _raw_payload(message: Message) -> bytes:
    """The undecoded body as bytes (the parser keeps undecodable bytes as surrogates)."""
    payload = message.get_payload()
    if not isinstance(payload, str):
        return b""
    return payload.encode("ascii", "surrogateescape")


def _mail_charset(charset: str) -> str | None:
    """The codec of a declared charset, or ``None`` when it cannot be a mail body's:
    unknown, not a text encoding (``rot13``, ``hex``), or not ASCII-compatible."""
    try:
        info = codecs.lookup(charset)
    except LookupError:
        return None
    if not getattr(info, "_is_text_encoding", True):
        return None
    try:
        ascii_compatible = "Mail: A-z 0-9\r\n".encode(info.name) == b"Mail: A-z 0-9\r\n"
    except (UnicodeError, LookupError):
        return None
    return info.name if ascii_compatible else None


def _reads_as_text(text: str) -> bool:
    """At most 1 % control characters or U+FFFD: what real text holds, and what binary
    bytes read as Latin-1 (about a quarter controls) do not."""
    return len(_ODD.findall(text)) <= len(text) // 100


_ODD = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f\ufffd]")
