"""E-mail messages (``.eml``, RFC 5322) to Markdown with the standard library's ``email``.

The subject becomes the title, From/To/Cc/Date a short header block, then the body: the
``text/plain`` part when there is one, else the ``text/html`` part through
:mod:`kbsync.convert.html`. Attachments are named, not converted (each would be a
document of its own; save it beside the message to index it).
"""

from __future__ import annotations

import email
import email.policy
from email.message import EmailMessage

from kbsync.convert.html import convert_html
from kbsync.convert.text import Extracted, decode_text, normalize_newlines
from kbsync.errors import CorruptDocument

MAIL_EXTENSIONS = frozenset({".eml"})
_HEADERS = ("From", "To", "Cc", "Date")


def convert_eml(data: bytes, *, name: str) -> Extracted:
    """Convert one message.

    Raises:
        CorruptDocument: the bytes hold no message header at all.
    """
    message = email.message_from_bytes(data, policy=email.policy.default)
    assert isinstance(message, EmailMessage)  # the default policy's message class
    if not message.keys():
        raise CorruptDocument(f"{name}: not an e-mail message (no header)")
    warnings: list[str] = []
    subject = _header(message, "Subject")
    lines = [f"# {subject}", ""] if subject else []
    lines += [f"**{key}:** {value}  " for key in _HEADERS if (value := _header(message, key))]
    body = _body(message, name, warnings)
    attachments = [part.get_filename() or part.get_content_type()
                   for part in message.iter_attachments()]
    if attachments:
        lines += ["", f"Attachments (not indexed): {', '.join(attachments)}"]
    markdown = "\n".join([*lines, "", body]).strip("\n")
    return Extracted(markdown, "email", "email", warnings=warnings, title_hint=subject or None)


def _header(message: EmailMessage, key: str) -> str:
    try:
        value = message.get(key)
    except (ValueError, IndexError, TypeError):  # a malformed header: shown raw below
        value = message.get_all(key, failobj=[""])[0] if key in message else ""
    return " ".join(str(value or "").split())


def _body(message: EmailMessage, name: str, warnings: list[str]) -> str:
    part = message.get_body(preferencelist=("plain", "html"))
    if part is None:
        return ""
    payload = part.get_payload(decode=True)
    # decode=True gives the transfer-decoded bytes of a leaf part (None when absent)
    raw = payload if isinstance(payload, bytes) else b""
    charset = part.get_content_charset()
    text = _decoded(raw, charset, name, warnings)
    if part.get_content_subtype() == "html":
        return convert_html(text.encode("utf-8"), name=name).markdown
    return normalize_newlines(text)


def _decoded(raw: bytes, charset: str | None, name: str, warnings: list[str]) -> str:
    """The part's text in its declared charset, else by the text converter's detection."""
    if charset:
        try:
            return raw.decode(charset)
        except (LookupError, UnicodeDecodeError):
            warnings.append(f"body not valid {charset}; its encoding was detected instead")
    text, _encoding, more = decode_text(raw, name)
    warnings.extend(more)
    return text
