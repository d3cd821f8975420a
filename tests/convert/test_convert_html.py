"""HTML through html-to-markdown: real pages, charsets, malformed and huge input.

The pages under ``tests/cases/html/`` are copied unchanged from Debian documentation
packages (postgresql-doc-15, linux-doc-6.1, debian-handbook zh-CN, octave-doc): one per
generator kind (DocBook XSL, Sphinx, publican, texinfo).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kbsync.convert import CONVERTER_VERSION, convert
from kbsync.convert.html import CONVERTER, CONVERTER_ID, convert_html
from kbsync.errors import CorruptDocument, EmptyDocument

CASES = Path(__file__).resolve().parents[1] / "cases" / "html"


def page(name: str) -> str:
    doc = convert(CASES / name, doc_id=name)
    assert doc.converter == CONVERTER and doc.source_type == "html"
    return doc.markdown


def test_converter_enters_the_fingerprint() -> None:
    assert CONVERTER_ID == "html-to-markdown-3.19.0"
    assert CONVERTER_VERSION.endswith("+" + CONVERTER_ID)


def test_docbook_table_kept_navigation_dropped() -> None:
    md = page("postgresql-view-pg-ident-file-mappings.html")
    assert md.startswith("## 54.10. `pg_ident_file_mappings`")
    assert "| `map_name` `text` Name of the map |" in md
    for noise in ("[Prev]", "[Next]", "[Home]"):  # navheader/navfooter tables
        assert noise not in md


def test_docbook_code_and_links() -> None:
    md = page("postgresql-libpq-single-row-mode.html")
    assert md.count("```") % 2 == 0 and md.count("```") >= 2
    assert "[`PQsendQuery`](libpq-async.html#LIBPQ-PQSENDQUERY)" in md


def test_sphinx_code_block_and_sidebar() -> None:
    md = page("linux-video-output.html")
    assert md.startswith("# Video Output Switcher Control")
    assert "```\nlinux:/sys/class/video_output # tree .\n.\n|-- CRT0\n" in md
    for noise in ("Submitting patches", "View page source", "Previous"):  # role=navigation parts
        assert noise not in md


def test_texinfo_headings_and_code() -> None:
    doc = convert(CASES / "octave-function-plotting.html", doc_id="o")
    assert doc.title == "15.2.1.2 Two-dimensional Function Plotting"
    assert "```\nfplot (@sin, [-10, 10], 201);\n```" in doc.markdown
    assert ": **fplot** *(fn, limits)*" in doc.markdown  # <var> inside <em>: no "*(*fn*)*"


def test_chinese_publican_lists() -> None:
    md = page("handbook-zh-sect.inetd.html")
    assert "## 9.6. `inetd` 超级服务器" in md
    assert "\n- 套接字类型： `stream` 用于TCP 连接， `dgram` 用于UDP 数据包。\n" in md


@pytest.mark.parametrize(("label", "codec", "text"), [
    ("gb2312", "gbk", "每五分钟归档一次 WAL 日志"),
    ("GBK", "gbk", "中途升级套餐如何计费"),
    ("big5", "big5", "繁體中文測試內容"),
    ("shift_jis", "cp932", "日本語のテキスト"),
    ("iso-8859-1", "cp1252", "café “quoted” – dash"),  # browsers read the label as cp1252
    ("windows-1251", "cp1251", "Привет, мир"),
])
def test_declared_charset(label: str, codec: str, text: str) -> None:
    html = (f'<html><head><meta http-equiv="Content-Type" content="text/html; charset={label}">'
            f"<title>{text}</title></head><body><p>{text}</p></body></html>")
    out = convert_html(html.encode(codec), name="p.html")
    assert out.markdown == text and out.title_hint == text and not out.warnings


def test_xml_declaration_encoding() -> None:
    html = '<?xml version="1.0" encoding="GB18030"?><html><body><p>扩展汉字</p></body></html>'
    assert convert_html(html.encode("gb18030"), name="p.xhtml").markdown == "扩展汉字"


def test_wrong_declared_charset_is_not_trusted() -> None:
    html = '<html><head><meta charset="utf-8"></head><body><p>每五分钟归档一次 WAL 日志，中文文本</p></body></html>'
    out = convert_html(html.encode("gbk"), name="p.html")
    assert out.markdown == "每五分钟归档一次 WAL 日志，中文文本"
    assert out.warnings == ["declared charset utf-8 does not match the bytes; decoded as gb18030"]
    assert "\ufffd" not in out.markdown


def test_undeclared_legacy_charset_is_detected() -> None:
    html = "<html><body><p>每五分钟归档一次 WAL 日志，中文文本测试内容足够长</p></body></html>"
    assert convert_html(html.encode("gbk"), name="p.html").markdown.startswith("每五分钟归档一次")


def test_unknown_charset_label_falls_back_to_detection() -> None:
    out = convert_html('<meta charset="x-no-such"><p>café</p>'.encode(), name="p.html")
    assert out.markdown == "café"


def test_binary_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "blob.html"
    path.write_bytes(b"<html>\x00\x01\x02\xff\xfe\x00binary" * 50)
    with pytest.raises(CorruptDocument, match=r"blob\.html: binary content"):
        convert(path, doc_id="b")


def test_only_boilerplate_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "menu.html"
    path.write_text("<html><body><header><a href='/'>Logo</a></header><nav>Home</nav>"
                    "<script>var x = 1;</script><footer>Privacy</footer></body></html>")
    with pytest.raises(EmptyDocument, match=r"menu\.html: no text after conversion"):
        convert(path, doc_id="m")


def test_site_header_dropped_article_header_kept() -> None:
    html = (b"<html><body><header><a href='/'>Logo text</a></header><main><article><header>"
            b"<h1>Article title</h1></header><p>Body.</p></article></main>"
            b"<div class='cookie-banner'>Accept cookies</div></body></html>")
    md = convert_html(html, name="a.html").markdown
    assert md == "# Article title\n\nBody."


def test_outside_main_dropped() -> None:
    html = b"<body><div>Outside</div><main><p>Inside</p></main><div>After</div></body>"
    assert convert_html(html, name="m.html").markdown == "Inside"


def test_malformed_markup_keeps_the_text() -> None:
    html = (b"<html><body><h2>Setup</h2><p>one <b>bold <i>both</b> italic</i><p>two"
            b"<ul><li>first<li>second</ul><table><tr><td>a<td>b<tr><td>c<td>d</table><div><span>")
    md = convert_html(html, name="bad.html").markdown
    assert md.startswith("## Setup\n\none **bold *both*** *italic*")
    assert "- first\n- second" in md and "| a | b |" in md and "| c | d |" in md


def test_glued_pages_are_not_nested() -> None:
    """Each stray <html><body> would be nested in the previous one by the parser."""
    unit = b"<html><head><title>T</title></head><body><h2>Part</h2><p>text</p></body></html>"
    out = convert_html(unit * 800, name="glued.html")
    assert out.markdown.count("## Part") == 800 and not out.warnings


def test_too_deep_nesting_is_flattened_and_reported() -> None:
    """Past the library's depth limit the text used to be lost; the tags below 256 levels are
    dropped instead, and the text kept (tests/convert/test_sec_limits.py: 200k levels)."""
    html = b"<body>" + b"<div>" * 5000 + b"deep" + b"</div>" * 5000 + b"<p>after</p>"
    out = convert_html(html, name="deep.html")
    assert out.markdown == "deep\n\nafter"
    assert len(out.warnings) == 1 and out.warnings[0].startswith("HTML nested 5000 levels deep")


def test_huge_page(tmp_path: Path) -> None:
    section = ("<h2>Section {i}</h2><p>" + "lorem ipsum dolor sit amet " * 40
               + "</p><table><tr><th>k</th><th>v</th></tr><tr><td>{i}</td><td>x</td></tr></table>")
    path = tmp_path / "huge.html"
    path.write_text("<html><body>" + "".join(section.format(i=i) for i in range(15_000)) + "</body></html>")
    assert path.stat().st_size > 15 * 2**20
    started = time.perf_counter()
    doc = convert(path, doc_id="h")
    assert time.perf_counter() - started < 60  # ~2 s on one core; markitdown took minutes
    assert doc.markdown.count("## Section ") == 15_000
    assert "## Section 14999\n" in doc.markdown and "| 14999 | x |" in doc.markdown


def test_htm_and_xhtml_use_the_same_converter(tmp_path: Path) -> None:
    for ext in (".htm", ".xhtml", ".HTML"):
        path = tmp_path / f"p{ext}"
        path.write_bytes(b"<html><body><h1>Hi</h1><p>there</p></body></html>")
        doc = convert(path, doc_id=ext)
        assert (doc.converter, doc.title, doc.markdown) == (CONVERTER, "Hi", "# Hi\n\nthere")
