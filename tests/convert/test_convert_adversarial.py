"""Files that real shares hold and converters choke on, generated here (never downloaded).

Each case asserts the exact error type, and that the message is one line naming the file.
"""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

import pytest

from kbsync.convert import convert, office
from kbsync.errors import (
    ArchiveBomb,
    ConversionError,
    CorruptDocument,
    EmptyDocument,
    EncryptedDocument,
    FileChangedDuringRead,
    FileTooLarge,
    KbsyncError,
    NoTextLayer,
    PermissionDenied,
    UnsupportedFormat,
)

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"
RANDOM = random.Random(20240402)


def expect(error: type[KbsyncError], path: Path, **kwargs) -> KbsyncError:
    """convert() raises exactly ``error``; its message is one line naming the file."""
    with pytest.raises(KbsyncError) as info:
        convert(path, doc_id="t", **kwargs)
    exc = info.value
    assert type(exc) is error, f"{type(exc).__name__}: {exc}"
    message = str(exc)
    assert "\n" not in message and message.startswith(str(path)), message
    return exc


# --- PDF -------------------------------------------------------------------------
def test_truncated_pdf_keeps_what_is_recoverable(write) -> None:
    data = (SAMPLE / "policies/security-policy.pdf").read_bytes()
    doc = convert(write("half.pdf", data[: len(data) // 2]), doc_id="t")
    assert doc.markdown.strip() and doc.page_offsets
    assert any("repaired" in w for w in doc.warnings)


def test_pdf_truncated_to_its_head_is_corrupt(write) -> None:
    data = (SAMPLE / "policies/security-policy.pdf").read_bytes()
    expect(CorruptDocument, write("head.pdf", data[:600]))


def test_garbage_pdf(write) -> None:
    expect(CorruptDocument, write("garbage.pdf", RANDOM.randbytes(20_000)))


def test_pdf_with_user_password(write, make_pdf) -> None:
    expect(EncryptedDocument, write("locked.pdf", make_pdf(2, user_pw="secret", owner_pw="owner")))


def test_pdf_with_owner_password_only_converts(write, make_pdf) -> None:
    doc = convert(write("owner.pdf", make_pdf(2, owner_pw="owner")), doc_id="t")
    assert doc.page_count == 2 and "Chapter 2" in doc.markdown


def test_image_only_pdf_has_no_text_layer(write, make_pdf) -> None:
    expect(NoTextLayer, write("scan.pdf", make_pdf(3, image_only=True)))


def test_blank_pdf_is_empty(write, make_pdf) -> None:
    expect(EmptyDocument, write("blank.pdf", make_pdf(2, blank=True)))


def test_300_page_pdf_in_bounded_time(write, make_pdf) -> None:
    path = write("manual.pdf", make_pdf(300))
    started = time.perf_counter()
    doc = convert(path, doc_id="t")
    elapsed = time.perf_counter() - started
    assert doc.page_count == 300
    assert doc.markdown[doc.page_offsets[299]:].startswith("# Chapter 10: Operations")
    assert elapsed < 20, f"{elapsed:.1f}s for 300 pages"  # ~3 s here; generous for CI


# --- Office -----------------------------------------------------------------------
@pytest.mark.parametrize("ext", [".docx", ".xlsx", ".pptx"])
def test_random_bytes_named_office(write, ext: str) -> None:
    expect(CorruptDocument, write(f"random{ext}", RANDOM.randbytes(4096)))


@pytest.mark.parametrize("ext", [".docx", ".xlsx", ".pptx"])
def test_zip_that_is_not_ooxml(write, make_zip, ext: str) -> None:
    expect(CorruptDocument, write(f"notes{ext}", make_zip({"notes.txt": b"hello"})))


def test_truncated_docx(write) -> None:
    data = (SAMPLE / "incidents/2024-03-12-ingestion-outage.docx").read_bytes()
    expect(CorruptDocument, write("cut.docx", data[: len(data) // 2]))


def test_docx_with_broken_xml(write, make_zip) -> None:
    data = make_zip({"[Content_Types].xml": b"<Types/>", "word/document.xml": b"<w:document"})
    expect(CorruptDocument, write("broken.docx", data))


def test_zip_bomb_named_docx(write, make_zip) -> None:
    # 40 MiB of zeros packs into ~40 KiB: ratio ~1000:1, over both the floor and the ratio
    data = make_zip({"[Content_Types].xml": b"<Types/>", "word/document.xml": bytes(40 * 2**20)})
    exc = expect(ArchiveBomb, write("bomb.docx", data))
    assert "ratio" in str(exc)


def test_zip_bomb_by_total_size(write, make_zip, monkeypatch) -> None:
    monkeypatch.setattr(office, "MAX_UNCOMPRESSED", 2**20)  # our own limit, scaled down
    data = make_zip({"xl/workbook.xml": RANDOM.randbytes(2 * 2**20)})
    expect(ArchiveBomb, write("huge.xlsx", data))


def test_zip_with_too_many_members(write, make_zip) -> None:
    members = {f"ppt/slides/s{i}.xml": b"" for i in range(office.MAX_MEMBERS + 1)}
    expect(ArchiveBomb, write("many.pptx", make_zip(members)))


def _cfb(extra: bytes) -> bytes:
    # The OLE2/CFB signature and a directory-entry name, as in an encrypted OOXML container.
    return bytes.fromhex("D0CF11E0A1B11AE1") + bytes(504) + extra + bytes(1024)


def test_encrypted_office_file(write) -> None:
    expect(EncryptedDocument, write("locked.xlsx", _cfb("EncryptionInfo".encode("utf-16-le"))))


def test_legacy_ole_file_named_docx(write) -> None:
    expect(CorruptDocument, write("old.docx", _cfb("WordDocument".encode("utf-16-le"))))


# --- empty, binary, unsupported, size ---------------------------------------------
@pytest.mark.parametrize(
    "ext", [".pdf", ".docx", ".xlsx", ".pptx", ".html", ".csv", ".json", ".txt", ".md", ".py"]
)
def test_zero_byte_file_is_empty(write, ext: str) -> None:
    expect(EmptyDocument, write(f"zero{ext}", b""))


@pytest.mark.parametrize("name", ["blank.txt", "blank.md", "blank.py", "blank.json", "blank.csv"])
def test_whitespace_only_is_empty(write, name: str) -> None:
    expect(EmptyDocument, write(name, " \n\t\r\n  \n"))


def test_html_without_text_is_empty(write) -> None:
    expect(EmptyDocument, write("nav.html", "<html><body><nav><a href='/'>Home</a></nav></body></html>"))


def test_nul_bytes_in_text_file(write) -> None:
    expect(CorruptDocument, write("blob.txt", b"ELF\x02\x01\x00\x00\x00" + RANDOM.randbytes(3000)))


def test_unsupported_extension(write) -> None:
    expect(UnsupportedFormat, write("photo.png", b"\x89PNG\r\n"))


def test_oversize_file(write) -> None:
    exc = expect(FileTooLarge, write("big.txt", "x" * 5000), max_bytes=1000)
    assert "1000" in str(exc)


def test_directory_with_a_supported_name(tmp_path: Path) -> None:
    (tmp_path / "folder.pdf").mkdir()
    expect(UnsupportedFormat, tmp_path / "folder.pdf")


def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    path = tmp_path / "pipe.txt"
    os.mkfifo(path)
    expect(UnsupportedFormat, path)


def test_missing_file(tmp_path: Path) -> None:
    expect(FileChangedDuringRead, tmp_path / "gone.md")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files regardless of their mode")
def test_unreadable_file(write) -> None:
    path = write("secret.md", "# hidden")
    path.chmod(0)
    expect(PermissionDenied, path)


def test_file_changing_while_read(write) -> None:
    """A writer keeps touching the file; some read must notice (stat before/after differ)."""
    path = write("busy.txt", "line of text\n" * 2_000_000)  # 26 MB: reading takes a while
    stop = threading.Event()

    def touch() -> None:
        ns = 1_700_000_000_000_000_000
        while not stop.is_set():
            ns += 1
            os.utime(path, ns=(ns, ns))

    writer = threading.Thread(target=touch, daemon=True)
    writer.start()
    try:
        for _ in range(40):
            try:
                convert(path, doc_id="t")
            except FileChangedDuringRead as exc:
                assert str(exc).startswith(str(path)) and "\n" not in str(exc)
                return
    finally:
        stop.set()
        writer.join()
    pytest.fail("40 reads never noticed the file changing")


# --- names ------------------------------------------------------------------------
def test_non_utf8_file_name(tmp_path: Path) -> None:
    raw = os.fsencode(tmp_path) + b"/caf\xe9-notes.md"
    with open(raw, "wb") as handle:
        handle.write("# Café notes\n\nOpening hours.".encode())
    path = Path(os.fsdecode(raw))
    doc = convert(path, doc_id="t")
    assert doc.title == "Café notes"
    broken = Path(os.fsdecode(os.fsencode(tmp_path) + b"/caf\xe9.docx"))
    broken.write_bytes(b"not a zip")
    with pytest.raises(CorruptDocument) as info:
        convert(broken, doc_id="t")
    str(info.value).encode("utf-8")  # printable: the undecodable byte is escaped


# --- a share of good and bad files side by side ---------------------------------------
def test_mixed_corpus(tmp_path: Path, make_pdf, make_zip) -> None:
    """Bad files cost exactly one typed error each; the good ones beside them convert."""
    bad = {
        "scan.pdf": (make_pdf(2, image_only=True), NoTextLayer),
        "locked.pdf": (make_pdf(1, user_pw="u"), EncryptedDocument),
        "garbage.pdf": (RANDOM.randbytes(3000), CorruptDocument),
        "bomb.docx": (make_zip({"word/document.xml": bytes(20 * 2**20)}), ArchiveBomb),
        "empty.xlsx": (b"", EmptyDocument),
        "random.pptx": (RANDOM.randbytes(2000), CorruptDocument),
    }
    for name, (data, _) in bad.items():
        (tmp_path / name).write_bytes(data)
    good = sorted(p for p in SAMPLE.rglob("*") if p.is_file())
    started = time.perf_counter()
    outcome: dict[str, object] = {}
    for path in sorted(tmp_path.iterdir()) + good:
        try:
            outcome[path.name] = convert(path, doc_id=path.name)
        except ConversionError as exc:
            outcome[path.name] = type(exc)
    assert time.perf_counter() - started < 30
    assert {n: outcome[n] for n in bad} == {n: err for n, (_, err) in bad.items()}
    assert all(not isinstance(outcome[p.name], type) for p in good)
