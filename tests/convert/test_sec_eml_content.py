"""Issue 37: ``.eml`` content silently lost, or garbage stored.

- a forwarded ``message/rfc822`` part kept only "Attachments (not indexed)";
- a ``multipart`` body with a missing or wrong boundary kept only the subject;
- a bogus charset or broken base64 stored garbage;
- 200 nested messages: the forwards are indexed down to ``MAX_FORWARD_DEPTH``, saying so.

Every message is built with Python's ``email`` package, written to a real file and
converted by :func:`kbsync.convert.convert`.
"""

from __future__ import annotations

import base64
import os
import sys
from email.message import EmailMessage
from pathlib import Path

import pytest

from kbsync.convert import convert
from kbsync.convert.mail import MAX_FORWARD_DEPTH
from kbsync.errors import CorruptDocument


def _message(subject: str, body: str, **content) -> EmailMessage:
    message = EmailMessage()
    message["Subject"] = subject
    message["From"] = "Ada <ada@example.org>"
    message["To"] = "team@example.org"
    message.set_content(body, **content)
    return message


def _convert(tmp_path: Path, data: bytes, name: str = "m.eml"):
    path = tmp_path / name
    path.write_bytes(data)
    return convert(path, doc_id=f"r/{name}")


def test_a_forwarded_message_is_indexed_with_its_headers(tmp_path):
    outer = _message("Fwd: launch", "See the plan below.")
    outer.add_attachment(_message("The launch plan", "The launch window opens Tuesday at dawn."))
    outer.add_attachment(b"%PDF-1.4 ...", maintype="application", subtype="pdf",
                         filename="slides.pdf")
    doc = _convert(tmp_path, bytes(outer))
    assert doc.title == "Fwd: launch"
    assert "## Forwarded message: The launch plan" in doc.markdown
    assert "The launch window opens Tuesday at dawn." in doc.markdown
    assert doc.markdown.count("**From:** Ada <ada@example.org>") == 2
    assert "Attachments (not indexed): slides.pdf" in doc.markdown
    assert "message/rfc822" not in doc.markdown and not doc.warnings


def _multipart(boundary_header: bytes) -> bytes:
    message = _message("Recipe", "The secret ingredient is saffron.")
    message.add_attachment(b"\x89PNG", maintype="image", subtype="png", filename="dish.png")
    data = bytes(message)
    declared = f'boundary="{message.get_boundary()}"'.encode()
    assert declared in data
    return data.replace(declared, boundary_header, 1)


@pytest.mark.parametrize("header", [b'boundary="not-the-one"', b"charset=utf-8"],
                         ids=["wrong boundary", "no boundary"])
def test_a_multipart_body_without_its_boundary_is_read_by_its_own(tmp_path, header):
    doc = _convert(tmp_path, _multipart(header))
    assert "The secret ingredient is saffron." in doc.markdown
    assert "dish.png" in doc.markdown and "PNG" not in doc.markdown.replace("dish.png", "")
    assert any("without its declared boundary" in w for w in doc.warnings)


def test_a_multipart_body_with_no_boundary_line_is_read_as_text(tmp_path):
    data = (b"Subject: Plain after all\r\nContent-Type: multipart/mixed\r\n\r\n"
            b"Only words, no parts.\r\n")
    doc = _convert(tmp_path, data)
    assert "Only words, no parts." in doc.markdown
    assert any("read as plain text" in w for w in doc.warnings)


@pytest.mark.parametrize("charset", ["x-bogus-42", "utf-16", "rot13"])
def test_a_bogus_charset_is_replaced_by_detection_with_a_warning(tmp_path, charset):
    message = _message("Charset", "Plain words about the harbour, twelve of them here.")
    message.set_param("charset", charset)
    doc = _convert(tmp_path, bytes(message))
    assert "Plain words about the harbour, twelve of them here." in doc.markdown
    assert any(f"declared charset {charset!r}" in w for w in doc.warnings)


def _with_base64_body(body: bytes) -> bytes:
    message = _message("Minutes", "placeholder", cte="base64")
    data = bytes(message)
    encoded = base64.b64encode(b"placeholder\n")
    assert encoded in data
    return data.replace(encoded, body, 1)


def test_base64_cut_short_is_decoded_as_far_as_it_goes(tmp_path):
    cut = base64.b64encode(b"The meeting is at noon in room four.\n")[:-3]
    doc = _convert(tmp_path, _with_base64_body(cut))
    assert "The meeting is at noon in room" in doc.markdown
    assert base64.b64encode(b"The meeting").decode() not in doc.markdown
    assert any("damaged base64" in w for w in doc.warnings)


@pytest.mark.parametrize("body", [b"Plain text that was never base64 at all, sent as such!!",
                                  base64.b64encode(os.urandom(600))],
                         ids=["not base64", "binary"])
def test_a_body_that_decodes_to_no_text_fails_in_one_line(tmp_path, body):
    with pytest.raises(CorruptDocument) as err:
        _convert(tmp_path, _with_base64_body(body))
    message = str(err.value)
    assert "\n" not in message and "m.eml" in message and "text/plain body" in message


def test_200_nested_forwards_are_indexed_down_to_the_cap(tmp_path):
    inner = _message("Level 0", "Deepest text.")
    for level in range(1, 200):
        outer = _message(f"Level {level}", f"Text of level {level}.")
        outer.add_attachment(inner)
        inner = outer
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)  # the email package writes nested parts recursively
    try:
        data = bytes(inner)
    finally:
        sys.setrecursionlimit(limit)
    doc = _convert(tmp_path, data)
    assert doc.title == "Level 199"
    assert doc.markdown.count("## Forwarded message:") == MAX_FORWARD_DEPTH
    deepest = 199 - MAX_FORWARD_DEPTH
    assert f"Text of level {deepest}." in doc.markdown
    assert f"Text of level {deepest - 1}." not in doc.markdown
    assert f"forwarded message 'Level {deepest - 1}'" in doc.markdown
    assert any(f"deeper than {MAX_FORWARD_DEPTH} levels" in w for w in doc.warnings)
