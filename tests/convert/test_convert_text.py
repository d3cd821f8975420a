"""Text decoding and the text-like formats (Markdown, plain text, reStructuredText, JSON, code)."""

from __future__ import annotations

import codecs
import json

import pytest

from kbsync.convert import convert
from kbsync.convert.text import decode_text, fence
from kbsync.errors import CorruptDocument

ZH_SIMPLIFIED = "数据库备份每天凌晨两点执行，保留三十天。如果备份失败，值班工程师会收到告警。"
ZH_TRADITIONAL = "資料庫備份每天凌晨兩點執行，保留三十天。如果備份失敗，值班工程師會收到告警。"
FRENCH = "Le café du matin coûte 2,50 €. Les réunions ont lieu à 9h30 précises, à Genève."


@pytest.mark.parametrize(
    ("raw", "expected", "encoding"),
    [
        (ZH_SIMPLIFIED.encode("gbk"), ZH_SIMPLIFIED, "gb18030"),
        (ZH_SIMPLIFIED.encode("gb18030"), ZH_SIMPLIFIED, "gb18030"),
        (ZH_TRADITIONAL.encode("big5"), ZH_TRADITIONAL, "big5"),
        (FRENCH.encode("cp1252"), FRENCH, "cp1252"),
        (codecs.BOM_UTF8 + FRENCH.encode(), FRENCH, "utf-8"),
        (codecs.BOM_UTF16_LE + ZH_SIMPLIFIED.encode("utf-16-le"), ZH_SIMPLIFIED, "utf-16-le"),
        (codecs.BOM_UTF16_BE + FRENCH.encode("utf-16-be"), FRENCH, "utf-16-be"),
        (codecs.BOM_UTF32_LE + FRENCH.encode("utf-32-le"), FRENCH, "utf-32-le"),
        ("Plain ASCII release notes, version 4.5.".encode("utf-16-le"),
         "Plain ASCII release notes, version 4.5.", "utf-16-le"),  # no BOM
        ((ZH_SIMPLIFIED + FRENCH).encode(), ZH_SIMPLIFIED + FRENCH, "utf-8"),
    ],
    ids=["gbk", "gb18030", "big5", "cp1252", "utf8-bom", "utf16le-bom", "utf16be-bom",
         "utf32le-bom", "utf16le-nobom", "utf8"],
)
def test_decode_text(raw: bytes, expected: str, encoding: str) -> None:
    text, used, warnings = decode_text(raw, "f.txt")
    assert (text, used, warnings) == (expected, encoding, [])


def test_undecidable_bytes_fall_back_to_latin1() -> None:
    raw = bytes([0x81, 0x8D, 0x8F, 0x90, 0x9D]) * 3  # undefined in cp1252, invalid elsewhere
    text, used, warnings = decode_text(raw, "f.txt")
    assert used == "latin-1" and text == raw.decode("latin-1") and warnings


def test_binary_is_corrupt() -> None:
    with pytest.raises(CorruptDocument):
        decode_text(b"PK\x03\x04\x14\x00\x00\x00\x08\x00" + bytes(range(256)), "f.txt")


def test_gbk_and_utf16_files_convert(write) -> None:
    gbk = convert(write("zh.txt", ZH_SIMPLIFIED.encode("gbk")), doc_id="t")
    assert gbk.markdown == ZH_SIMPLIFIED
    utf16 = convert(write("notes.md", codecs.BOM_UTF16_LE + "# 标题\r\n\r\n正文".encode("utf-16-le")),
                    doc_id="t")
    assert utf16.markdown == "# 标题\n\n正文" and utf16.title == "标题"


def test_markdown_setext_headings_become_atx(write) -> None:
    md = "---\ntitle: front\n---\n\nGuide\n=====\n\nIntro.\n\nSetup\n-----\n\n- item\n---\n"
    doc = convert(write("guide.md", md), doc_id="t")
    assert doc.title == "Guide"
    assert "# Guide\n\nIntro.\n\n## Setup\n\n- item\n---" in doc.markdown
    assert doc.markdown.startswith("---\ntitle: front\n---")  # front matter untouched


def test_rst_titles_become_headings(write) -> None:
    rst = "=======\nRunbook\n=======\n\nBackups\n-------\n\nDaily at 02:00.\n\nRestore\n-------\n"
    doc = convert(write("runbook.rst", rst), doc_id="t")
    assert doc.markdown == "# Runbook\n\n## Backups\n\nDaily at 02:00.\n\n## Restore"
    assert (doc.title, doc.source_type) == ("Runbook", "text")


def test_code_fence_survives_backticks(write) -> None:
    src = 'DOC = """\n```sh\nmake\n```\n"""\n# not a heading\n'
    doc = convert(write("tool.py", src), doc_id="t")
    assert doc.markdown.startswith("````python\n") and doc.markdown.endswith("\n````")
    assert doc.title == "tool"  # a comment inside the fence is no title
    assert fence("x", "go") == "```go\nx\n```"


def test_minified_json_is_pretty_printed(write) -> None:
    value = {"services": [{"name": f"svc-{i}", "owner": "platform"} for i in range(40)]}
    doc = convert(write("catalog.json", json.dumps(value, separators=(",", ":"))), doc_id="t")
    body = doc.markdown.removeprefix("```json\n").removesuffix("\n```")
    assert json.loads(body) == value and body.count("\n") > 40
    assert doc.warnings == []


def test_invalid_json_is_text_with_a_warning(write) -> None:
    doc = convert(write("broken.json", '{"a": 1,'), doc_id="t")
    assert '{"a": 1,' in doc.markdown
    assert len(doc.warnings) == 1 and doc.warnings[0].startswith("invalid JSON")


def test_control_characters_and_crlf(write) -> None:
    doc = convert(write("win.txt", "line one\r\nline\x07 two\r\n\x0c"), doc_id="t")
    assert doc.markdown == "line one\nline two"
