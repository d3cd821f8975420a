"""HTML to Markdown through ``html-to-markdown`` (a Rust core; ~15-25x markitdown's speed).

markitdown's HtmlConverter parses a page twice with BeautifulSoup's pure-Python parser
(once to drop boilerplate, once inside markdownify): ~0.1 s for a 30 KB manual page.
``html_to_markdown.convert`` parses and writes in native code (a few milliseconds) and keeps
headings, nested lists, fenced code (with the ``language-*`` class) and GFM tables.

What this module adds around it, and why:

* **Decoding** (the library takes ``str``): a BOM, else the charset the page declares in
  ``<meta charset>`` / ``http-equiv`` or an XML declaration (first 4 KiB), else strict UTF-8,
  else :func:`kbsync.convert.text.decode_text`'s detection. A declared charset the bytes do
  not decode under is not trusted (a warning names it) and detection decides, so a page
  mislabelled as UTF-8 comes out as text, never as U+FFFD garbage. Labels follow the WHATWG
  mapping browsers use (``iso-8859-1`` means cp1252, ``gb2312`` means GB18030...).
* **Boilerplate** is dropped as kbsync's markitdown path did (until CONVERTER_VERSION 2):
  scripts, styles, ``nav``/``footer``/``aside``, navigation roles, cookie
  banners, sidebars, tables of contents, buttons, inline SVG; also DocBook's and texinfo's
  Prev/Up/Next bars (``navheader``, ``navfooter``, ``nav-panel``), the same on every page. A ``<header>`` without an
  ``<h1>``/``<h2>`` is a site header (logo, menu) and goes; an article header keeps its
  title. When the page has exactly one ``<main>``, only its content is converted.
  The library's own preprocessing is off: it drops every ``<header>`` (titles too) and
  every ``<form>`` (ASP.NET WebForms pages wrap the whole page in one).
* **Stray ``<html>``/``<body>`` tags** (pages glued together) are removed before parsing:
  browsers ignore them, but the library nests each one in the previous, and 500 glued pages
  would reach its depth limit.
* **Limits**: the library skips what lies past its depth limits (512 levels of tree repair,
  1024 of traversal). A page it warns about is converted again with its tags below
  :data:`~kbsync.convert.html_depth.MAX_DEPTH` (256) levels dropped
  (:func:`~kbsync.convert.html_depth.flatten_deep`): the text down there is kept, as one
  flat run, and a warning names the depth. Should the library still cut (nesting its own
  way, through the elements that count leaves out), the text below is lost and a warning
  says so. A page the library cannot parse raises ``CorruptDocument``.

Not handled (a difference from the markitdown path): a ``role="main"`` element on a
``<div>`` does not narrow the page (a CSS selector cannot say "everything outside it"); its
sidebars still go when they carry a navigation role, as Sphinx's do.
"""

from __future__ import annotations

import codecs
import html as html_lib
import logging
import re
from functools import cache

# the Markdown fix-ups the converters share
from kbsync.convert.html_depth import MAX_DEPTH, flatten_deep
from kbsync.convert.installed import installed_version
from kbsync.convert.office import clean_images, tidy_tables
from kbsync.convert.text import Extracted, decode_text, normalize_newlines
from kbsync.errors import CorruptDocument, EmptyDocument

logger = logging.getLogger(__name__)

#: The converter name in :class:`~kbsync.models.Document` (``converter``) and, with the
#: library version, in the document fingerprint (``kbsync.convert.CONVERTER_VERSION``).
CONVERTER = "html-to-markdown"
CONVERTER_ID = f"{CONVERTER}-{installed_version('html-to-markdown')}"
HTML_EXTENSIONS = frozenset({".html", ".htm", ".xhtml"})

_SNIFF = 4096
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.I)
_XML_ENCODING = re.compile(rb"""^\s*<\?xml[^>]+encoding\s*=\s*["']([A-Za-z0-9._-]+)""", re.I)
# WHATWG encoding labels that differ from Python's codecs (browsers decode these as the
# superset; a page "in" ISO-8859-1 nearly always holds cp1252 quotes and dashes).
_WHATWG = {"iso-8859-1": "cp1252", "latin1": "cp1252", "latin-1": "cp1252", "us-ascii": "cp1252",
           "ascii": "cp1252", "gb2312": "gb18030", "gbk": "gb18030", "x-gbk": "gb18030",
           "big5": "big5hkscs", "shift_jis": "cp932", "sjis": "cp932", "euc-kr": "cp949",
           "ks_c_5601-1987": "cp949", "windows-874": "cp874", "tis-620": "cp874"}
_BOM_PREFIXES = (codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)

_TITLE = re.compile(r"<title[^>]*>(.*?)</title\s*>", re.I | re.S)
_MAIN_OPEN = re.compile(r"<main(?=[\s>/])", re.I)
_MAIN_CLOSE = re.compile(r"</main\s*>", re.I)
_HEADER_OPEN = re.compile(r"<header(?=[\s>/])", re.I)
_HEADER_CLOSE = re.compile(r"</header\s*>", re.I)
_PAGE_TAGS = re.compile(r"</?(?:html|body)(?=[\s>/])[^>]*>", re.I)
_HEADING_TAG = re.compile(r"<h[12](?=[\s>/])", re.I)
_MAX_HEADERS = 200  # past this, headers are left alone (bounds the scan on odd pages)

_DROP_TAGS = ("script", "style", "noscript", "template", "nav", "footer", "aside", "iframe",
              "svg", "button")
_DROP_ROLES = ("navigation", "banner", "contentinfo", "search", "complementary")
_DROP_NAMES = ("cookie-banner", "cookies", "cookie-consent", "breadcrumb", "breadcrumbs",
               "sidebar", "site-header", "site-footer", "skip-link", "toc",
               # DocBook's Prev/Up/Next tables and texinfo 7's panel: the same on every page
               "navheader", "navfooter", "nav-panel")
_SELECTORS = [*_DROP_TAGS, *(f'[role="{r}"]' for r in _DROP_ROLES),
              *(f".{n}" for n in _DROP_NAMES), *(f"#{n}" for n in _DROP_NAMES)]

@cache
def _library():
    """``(html_to_markdown, its options, the errors it raises)``, imported on the first page:
    the plan of a run with nothing to convert never pays its import (~50 ms)."""
    import html_to_markdown as h2m

    options = h2m.ConversionOptions(
        extract_metadata=False,  # else a YAML front matter of <meta> tags heads the Markdown
        preprocessing=h2m.PreprocessingOptions(enabled=False),
        exclude_selectors=_SELECTORS,
        strip_tags=["var"],  # <var> inside <em> gave "*(*fn*)*": keep the text, not the markup
        bullets="-",
        compact_tables=True,  # no column padding: fewer tokens for the same table
    )
    errors = (h2m.ConversionError, h2m.ParseError, h2m.InvalidInputError, h2m.InputTooLargeError,
              h2m.PanicError, h2m.SanitizationError, h2m.OtherError, h2m.IoError)
    return h2m, options, errors


def preload() -> None:
    """Import the library (a conversion worker's forkserver does before it forks)."""
    _library()


def convert_html(data: bytes, *, name: str) -> Extracted:
    """Convert one HTML page.

    Returns:
        Markdown with ``converter="html-to-markdown"``, ``source_type="html"``, the
        ``<title>`` as title hint, and warnings for a distrusted charset, a flattened
        nesting or a cut depth.

    Raises:
        CorruptDocument: binary content (NUL bytes), or the library failed on the page.
        EmptyDocument: no text above the depth the library stopped at (the message says).
    """
    text, warnings = decode_html(data, name)
    title = _title(text)
    text = _drop_site_headers(_only_main(text))
    content, cut = _to_markdown(text, name)
    if cut is not None:  # too deep for the library: again, with the tags down there dropped
        flat, deepest = flatten_deep(text)
        if deepest > MAX_DEPTH:
            content, cut = _to_markdown(flat, name)
            warnings.append(f"HTML nested {deepest} levels deep: the tags below level {MAX_DEPTH} "
                            "were dropped, their text kept")
    if cut is not None:
        warnings.append(f"HTML nested too deeply, text below the limit dropped ({cut})")
    md = tidy_tables(clean_images(normalize_newlines(content).strip()))
    md = re.sub(r"\n{3,}", "\n\n", md)
    if cut is not None and not re.search(r"\w", md):
        raise EmptyDocument(f"{name}: no text above the nesting depth the HTML converter "
                            f"stops at ({cut})")
    return Extracted(md, CONVERTER, "html", warnings=warnings, title_hint=title)


def _to_markdown(text: str, name: str) -> tuple[str, str | None]:
    """(Markdown, the library's depth warning or None) of a page's text."""
    h2m, options, errors = _library()
    try:
        result = h2m.convert(text, options)
    except MemoryError:
        raise
    except errors as exc:
        detail = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise CorruptDocument(f"{name}: cannot read HTML ({type(exc).__name__}: {detail})") from exc
    cut = None
    for warning in result.warnings:
        message = " ".join(str(getattr(warning, "message", warning)).split())[:200]
        if "depth" in message.lower():
            cut = message
        else:
            logger.debug("%s: html-to-markdown: %s", name, message)
    return result.content or "", cut


def decode_html(data: bytes, name: str) -> tuple[str, list[str]]:
    """The page as text: BOM, then the declared charset if the bytes agree, then detection.

    Returns:
        (text, warnings). Raises CorruptDocument for binary content (as decode_text).
    """
    declared = None if data.startswith(_BOM_PREFIXES) else _declared_charset(data[:_SNIFF])
    if declared is not None:
        try:
            return data.decode(declared), []
        except UnicodeDecodeError:
            text, encoding, warnings = decode_text(data, name)
            return text, [f"declared charset {declared} does not match the bytes; decoded as {encoding}",
                          *warnings]
    text, _encoding, warnings = decode_text(data, name)
    return text, warnings


def _declared_charset(head: bytes) -> str | None:
    """The Python codec for the charset the page declares, or None (none, or unknown)."""
    match = _XML_ENCODING.search(head) or _META_CHARSET.search(head)
    if match is None:
        return None
    label = match.group(1).decode("ascii").lower()
    label = _WHATWG.get(label, label)
    try:
        codec = codecs.lookup(label).name
    except LookupError:
        logger.debug("unknown charset label %r: detection decides", label)
        return None
    # A page saved as UTF-8 but still saying utf-16 (a copy of a copy) has no NULs: the
    # label is wrong, not the bytes.
    return None if codec.startswith(("utf-16", "utf-32")) else codec


def _title(text: str) -> str | None:
    match = _TITLE.search(text, 0, 256 * 1024)
    if match is None:
        return None
    title = " ".join(html_lib.unescape(re.sub(r"<[^>]+>", "", match.group(1))).split())
    return title or None


def _only_main(text: str) -> str:
    """The ``<main>`` element alone when the page has exactly one (HTML allows one visible),
    else the page; either way without ``<html>``/``<body>`` tags (the parser implies them)."""
    opens = _MAIN_OPEN.findall(text)
    closes = _MAIN_CLOSE.findall(text)
    start = _MAIN_OPEN.search(text)
    end = _MAIN_CLOSE.search(text)
    if len(opens) == 1 and len(closes) == 1 and start and end and end.start() > start.start():
        text = text[start.start():end.end()]
    return _PAGE_TAGS.sub("", text)


def _drop_site_headers(text: str) -> str:
    """Remove ``<header>`` elements without an ``<h1>``/``<h2>`` (headers do not nest)."""
    if len(_HEADER_OPEN.findall(text)) > _MAX_HEADERS:
        return text
    out: list[str] = []
    pos = 0
    while True:
        start = _HEADER_OPEN.search(text, pos)
        if start is None:
            break
        end = _HEADER_CLOSE.search(text, start.end())
        if end is None:
            break  # unclosed: the parser decides where it ends; leave it
        out.append(text[pos:start.start()])
        block = text[start.start():end.end()]
        if _HEADING_TAG.search(block):
            out.append(block)
        pos = end.end()
    out.append(text[pos:])
    return "".join(out)
