"""Plain text, Markdown, reStructuredText, JSON and source code to Markdown.

Also holds what the other converters share: the :class:`Extracted` record, text decoding
(:func:`decode_text`) and page joining (:func:`join_pages`).

Encoding detection order, and why:

1. **BOM** (UTF-32 before UTF-16, because the UTF-32-LE BOM starts with the UTF-16-LE one;
   then UTF-8): a BOM is explicit, so it wins.
2. **NUL bytes** without a BOM: BOM-less UTF-16 if the NULs sit on alternate bytes, otherwise
   the file is binary (``CorruptDocument``): a text file never holds NUL.
3. **UTF-8, strict**: the common case, and random non-UTF-8 bytes almost never form valid UTF-8,
   so success is strong evidence.
4. **GB18030 / Big5 / cp1252** chosen by ``charset_normalizer`` (already a markitdown
   dependency) restricted to those three. A fixed try-in-order chain does not work here:
   GB18030 decodes most Latin-1 text without error (``é`` + ASCII letter is a valid GB18030
   pair), and Big5 text often decodes as GB18030 nonsense; charset_normalizer scores the
   decoded text for mess and language coherence instead. GB18030 is a superset of GBK and
   GB2312, cp1252 of printable Latin-1.
5. **Latin-1**: decodes any byte string, so it is the last resort (with a warning).
"""

from __future__ import annotations

import codecs
import json
import logging
import re
from dataclasses import dataclass, field

from kbsync.errors import CorruptDocument

logger = logging.getLogger(__name__)

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_LEGACY_ENCODINGS = ["gb18030", "big5", "cp1252"]
# charset_normalizer reads at most this much: detection on a prefix is as good and bounded.
_DETECT_SAMPLE = 256 * 1024
# Control characters other than tab/newline carry no meaning in text and upset embedders.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")

MARKDOWN_EXTENSIONS = frozenset({".md", ".markdown", ".mdown", ".mkd"})
PLAIN_EXTENSIONS = frozenset({".txt", ".text", ".log", ".rst"})
JSON_EXTENSIONS = frozenset({".json", ".jsonl", ".ndjson"})
# extension -> fence language. Deliberately absent: .env, .pem, .key and other files that
# usually hold secrets rather than knowledge.
CODE_LANGUAGES: dict[str, str] = {
    ".py": "python", ".pyi": "python", ".js": "javascript", ".mjs": "javascript",
    ".cjs": "javascript", ".jsx": "jsx", ".ts": "typescript", ".tsx": "tsx",
    ".java": "java", ".kt": "kotlin", ".kts": "kotlin", ".scala": "scala", ".go": "go",
    ".rs": "rust", ".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp",
    ".hpp": "cpp", ".hh": "cpp", ".cs": "csharp", ".rb": "ruby", ".php": "php",
    ".swift": "swift", ".m": "objectivec", ".lua": "lua", ".pl": "perl", ".r": "r",
    ".dart": "dart", ".sh": "bash", ".bash": "bash", ".zsh": "zsh", ".ps1": "powershell",
    ".sql": "sql", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".ini": "ini",
    ".cfg": "ini", ".conf": "conf", ".properties": "properties", ".xml": "xml",
    ".proto": "protobuf", ".graphql": "graphql", ".tf": "hcl", ".hcl": "hcl",
    ".gradle": "groovy", ".css": "css", ".scss": "scss", ".vue": "vue", ".tex": "latex",
}
TEXT_EXTENSIONS = (
    MARKDOWN_EXTENSIONS | PLAIN_EXTENSIONS | JSON_EXTENSIONS | frozenset(CODE_LANGUAGES)
)


@dataclass
class Extracted:
    """What a format converter hands back before the common checks.

    ``page_offsets`` follows the :class:`kbsync.models.Document` invariant.
    ``title_hint`` is used when the Markdown has no heading (e.g. HTML ``<title>``);
    ``title_from_heading`` is False where the first heading is no title (an XLSX sheet name).
    ``ocr_pages`` and ``scanned_pages`` as in :class:`kbsync.models.Document`.
    """

    markdown: str
    converter: str
    source_type: str
    page_offsets: list[int] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    title_hint: str | None = None
    title_from_heading: bool = True
    ocr_pages: dict[int, float] = field(default_factory=dict)
    scanned_pages: int = 0


def join_pages(pages: list[str]) -> tuple[str, list[int]]:
    """Join per-page Markdown with blank lines and return (markdown, page start offsets).

    Offsets are strictly increasing even across empty pages, because the separator between
    two pages is never empty.
    """
    offsets: list[int] = []
    parts: list[str] = []
    pos = 0
    for i, page in enumerate(pages):
        if i:
            parts.append("\n\n")
            pos += 2
        offsets.append(pos)
        parts.append(page)
        pos += len(page)
    return "".join(parts), offsets


def normalize_newlines(text: str) -> str:
    """CRLF/CR to LF, drop a BOM character and stray control characters."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\ufeff", "")
    return _CONTROL.sub("", text)


def decode_text(data: bytes, name: str) -> tuple[str, str, list[str]]:
    """Decode bytes of a text file: returns (text, encoding, warnings).

    Raises:
        CorruptDocument: NUL bytes that are not UTF-16 (a binary file).
    """
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                return data[len(bom):].decode(encoding), encoding, []
            except UnicodeDecodeError as exc:
                raise CorruptDocument(f"{name}: invalid {encoding} after its BOM: {exc.reason}") from exc
    if b"\x00" in data:
        utf16 = _bomless_utf16(data)
        if utf16 is None:
            raise CorruptDocument(f"{name}: binary content (NUL bytes) in a text file")
        try:
            return data.decode(utf16), utf16, []
        except UnicodeDecodeError as exc:
            raise CorruptDocument(f"{name}: binary content (NUL bytes) in a text file") from exc
    try:
        return data.decode("utf-8"), "utf-8", []
    except UnicodeDecodeError:
        pass
    legacy = _detect_legacy(data)
    if legacy is not None:
        try:
            return data.decode(legacy), legacy, []
        except UnicodeDecodeError:
            # the sample decoded but a later byte did not: fall through to Latin-1
            logger.debug("%s: %s failed past the detection sample", name, legacy)
    return data.decode("latin-1"), "latin-1", ["encoding not recognised; decoded as Latin-1"]


def _bomless_utf16(data: bytes) -> str | None:
    sample = data[:4096]
    even = sample[0::2].count(0)
    odd = sample[1::2].count(0)
    half = len(sample) // 2 or 1
    # ASCII-heavy UTF-16 has a NUL in nearly every high byte; demand a clear majority.
    if odd > 0.3 * half and even < 0.05 * half and len(data) % 2 == 0:
        return "utf-16-le"
    if even > 0.3 * half and odd < 0.05 * half and len(data) % 2 == 0:
        return "utf-16-be"
    return None


def _detect_legacy(data: bytes) -> str | None:
    import charset_normalizer  # imported here: only non-UTF-8 files pay for it

    sample = data[:_DETECT_SAMPLE]
    best = charset_normalizer.from_bytes(sample, cp_isolation=_LEGACY_ENCODINGS).best()
    if best is None:
        return None
    return codecs.lookup(best.encoding).name


def fence(body: str, language: str) -> str:
    """Wrap text in a fenced code block whose fence is longer than any backtick run inside."""
    longest = max((len(m) for m in re.findall(r"`{3,}", body)), default=2)
    ticks = "`" * (longest + 1)
    return f"{ticks}{language}\n{body.rstrip()}\n{ticks}"


# reStructuredText section titles: a line underlined (optionally overlined) by punctuation.
_RST_ADORNMENT = re.compile(r"^([=\-~^\"'`#*+:.])\1{2,}\s*$")


def _rst_headings(text: str) -> str:
    """Turn reStructuredText underlined titles into ``#`` headings (levels in order of first use)."""
    lines = text.split("\n")
    out: list[str] = []
    levels: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        m = _RST_ADORNMENT.match(nxt)
        if line.strip() and not _RST_ADORNMENT.match(line) and m and len(nxt.strip()) >= len(line.strip()):
            char = m.group(1)
            if char not in levels:
                levels.append(char)
            level = min(levels.index(char) + 1, 6)
            if out and _RST_ADORNMENT.match(out[-1]):
                out.pop()  # overline
            out.append("#" * level + " " + line.strip())
            i += 2
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_NOT_A_TITLE = re.compile(r"^\s*([-*+>|#]|\d+[.)]\s|\s{4})")


def _setext_to_atx(text: str) -> str:
    """Markdown setext headings (``Title`` over ``===``/``---``) to ``#``/``##`` headings.

    The chunker only reads ``#`` headings. Only a one-line paragraph counts as a title
    (so a ``---`` rule under a list or table is left alone); fenced code and YAML front
    matter are skipped.
    """
    lines = text.split("\n")
    out: list[str] = []
    start = 0
    if lines and lines[0].strip() == "---":  # front matter: copy through its closing line
        for j in range(1, len(lines)):
            if lines[j].strip() in ("---", "..."):
                out.extend(lines[: j + 1])
                start = j + 1
                break
    fence: str | None = None
    for line in lines[start:]:
        marker = _FENCE_LINE.match(line)
        if marker:
            if fence is None:
                fence = marker.group(1)[0]
            elif marker.group(1)[0] == fence:
                fence = None
        m = _SETEXT.match(line) if fence is None else None
        if (m and len(m.group(1)) >= 3 and out and out[-1].strip()
                and not _NOT_A_TITLE.match(out[-1]) and (len(out) < 2 or not out[-2].strip())):
            out[-1] = ("# " if m.group(1)[0] == "=" else "## ") + out[-1].strip()
            continue
        out.append(line)
    return "\n".join(out)


def convert_text(data: bytes, *, ext: str, name: str) -> Extracted:
    """Convert a text-like file. Source code and JSON become one fenced block.

    JSON goes here rather than through markitdown: markitdown's JSON path is its plain-text
    converter, which adds nothing over our decoding; here it gets a ``json`` fence, and
    minified JSON is pretty-printed so the chunker can split it at line breaks.
    """
    text, encoding, warnings = decode_text(data, name)
    text = normalize_newlines(text)
    if encoding not in ("utf-8", "ascii"):
        logger.debug("%s decoded as %s", name, encoding)
    if ext in MARKDOWN_EXTENSIONS:
        return Extracted(_setext_to_atx(text).strip("\n"), "text", "markdown", warnings=warnings)
    if ext in PLAIN_EXTENSIONS:
        # underlined titles in .txt follow the reStructuredText habit; a .log has none
        body = text if ext == ".log" else _rst_headings(text)
        return Extracted(body.strip("\n"), "text", "text", warnings=warnings)
    if ext in JSON_EXTENSIONS:
        body, json_warnings = _json_body(text, ext)
        if not body.strip():
            return Extracted("", "text", "json", warnings=warnings)
        return Extracted(fence(body, "json"), "text", "json", warnings=warnings + json_warnings)
    language = CODE_LANGUAGES[ext]
    if not text.strip():
        return Extracted("", "text", "code", warnings=warnings)
    return Extracted(fence(text.strip("\n"), language), "text", "code", warnings=warnings)


def _json_body(text: str, ext: str) -> tuple[str, list[str]]:
    if ext != ".json" or not text.strip():
        return text.strip("\n"), []
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        return text.strip("\n"), [f"invalid JSON ({exc}); indexed as text"[:200]]
    # Pretty-print only what is minified (long lines): readable files stay byte-for-byte.
    if max((len(line) for line in text.splitlines()), default=0) > 400:
        return json.dumps(value, indent=2, ensure_ascii=False), []
    return text.strip("\n"), []
