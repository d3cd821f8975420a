"""Issue 22: files with no extension (README, Makefile, Dockerfile), TSV and EML are read;
what stays unsupported (RTF, binaries without an extension) is counted by kind."""

from __future__ import annotations

from email.message import EmailMessage
from pathlib import Path

import pytest

from kbsync.convert import convert, ignored_kind, is_supported
from kbsync.convert.plain_files import SNIFF_BYTES, looks_like_text

ELF = b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4


def _write(path: Path, data: bytes | str) -> Path:
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


@pytest.mark.parametrize("name, text, fence", [
    ("README", "Project Zephyr\n==============\n\nHow to install the zephyr tool.\n", None),
    ("LICENSE", "Permission is hereby granted, free of charge, to any person\n", None),
    ("Makefile", "all:\n\tcc -o zephyr main.c\n", "```makefile"),
    ("Dockerfile", "FROM debian:13\nRUN apt-get install zephyr\n", "```dockerfile"),
])
def test_a_text_file_without_extension_is_read_by_its_content(tmp_path, name, text, fence):
    path = _write(tmp_path / name, text)
    assert is_supported(path)
    doc = convert(path, doc_id=f"r/{name}")
    assert text.split()[-1].rstrip(".") in doc.markdown
    if fence:
        assert doc.markdown.startswith(fence) and doc.source_type == "code"
    elif name == "README":
        assert doc.title == "Project Zephyr"  # an underlined title, as in .txt


@pytest.mark.parametrize("name, data", [
    ("zephyr", ELF),  # an executable
    ("EMPTY", b""),
    ("blank", b"  \n\n"),
    ("latin", "caf\xe9 cr\xe8me".encode("latin-1")),  # no extension says it is text
    ("id_rsa", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n"),  # by its name
    # a key under any other name is read, then refused as SecretDetected (issue 37:
    # tests/ingest/test_secrets_ingest.py)
])
def test_what_is_not_plain_text_without_an_extension_is_ignored(tmp_path, name, data):
    path = _write(tmp_path / name, data)
    assert not is_supported(path)
    assert ignored_kind(name) == "(no extension)"


def test_sniffing_allows_a_character_cut_at_the_end_of_the_head():
    head = ("é" * SNIFF_BYTES).encode("utf-8")[:SNIFF_BYTES - 1]  # ends mid-character
    assert looks_like_text(head, complete=False)
    assert not looks_like_text(head, complete=True)
    assert looks_like_text(b"\xef\xbb\xbfhello", complete=True)  # a UTF-8 BOM
    assert not looks_like_text(b"hello\x00world", complete=True)


def test_a_fifo_without_extension_never_blocks_discovery(tmp_path):
    import os

    os.mkfifo(tmp_path / "pipe")
    assert not is_supported(tmp_path / "pipe")


def test_tsv_is_a_table_with_its_header(tmp_path):
    rows = ["name\tcity\tnote", 'Ada\tLondon\tsays "hi"', "Lin\tTaipei\t台北"]
    path = _write(tmp_path / "people.tsv", "\n".join(rows) + "\n")
    doc = convert(path, doc_id="r/people.tsv")
    assert doc.source_type == "tsv"
    lines = doc.markdown.splitlines()
    assert [c.strip() for c in lines[0].strip("|").split("|")] == ["name", "city", "note"]
    assert any("Ada" in line and "London" in line and '"hi"' in line for line in lines)
    assert any("台北" in line for line in lines)


def _mail(html: bool = False, attachment: bool = False) -> bytes:
    message = EmailMessage()
    message["Subject"] = "Quarterly zephyr review"
    message["From"] = "Ada <ada@example.org>"
    message["To"] = "team@example.org"
    message["Date"] = "Tue, 01 Dec 2026 10:00:00 +0000"
    if html:
        message.set_content("<html><body><h2>Agenda</h2><p>Budget für 2027</p></body></html>",
                            subtype="html")
    else:
        message.set_content("The review is on Friday.\nBudget für 2027 is agreed.\n")
    if attachment:
        message.add_attachment(b"%PDF-1.4 ...", maintype="application", subtype="pdf",
                               filename="slides.pdf")
    return bytes(message)


def test_an_eml_message_is_its_subject_headers_and_body(tmp_path):
    doc = convert(_write(tmp_path / "review.eml", _mail(attachment=True)), doc_id="r/review.eml")
    assert doc.title == "Quarterly zephyr review" and doc.source_type == "email"
    assert "**From:** Ada <ada@example.org>" in doc.markdown
    assert "Budget für 2027 is agreed." in doc.markdown
    assert "slides.pdf" in doc.markdown and "%PDF" not in doc.markdown


def test_an_html_only_eml_message_goes_through_the_html_converter(tmp_path):
    doc = convert(_write(tmp_path / "agenda.eml", _mail(html=True)), doc_id="r/agenda.eml")
    assert "Agenda" in doc.markdown and "Budget für 2027" in doc.markdown
    assert "<p>" not in doc.markdown


def test_rtf_stays_unsupported_and_is_counted_by_kind(tmp_path):
    path = _write(tmp_path / "Memo.RTF", r"{\rtf1\ansi Hello}")
    assert not is_supported(path) and ignored_kind(path.name) == ".rtf"
