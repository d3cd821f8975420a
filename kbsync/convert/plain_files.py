"""Text files known by their content (``README``, ``Makefile``: no extension) and TSV tables.

A file without an extension is read as text only when its first
:data:`SNIFF_BYTES` are UTF-8 (a BOM allowed) without a NUL byte: binaries (executables,
images without an extension) almost never pass, and a share's ``README`` or ``LICENSE``
almost always does. Legacy encodings are left out on purpose: without an extension
nothing else says the bytes are text. Names that usually hold secrets (``id_rsa``,
``credentials``) are never read, as ``.env`` and ``.pem`` are not. A secret in the content
(a private key block anywhere in the file, an access key, a password assignment) is found
by the one detector every converted text goes through (:mod:`kbsync.text.secrets`), whatever
the extension: the file is then reported as ``SecretDetected``, not indexed.
"""

from __future__ import annotations

import codecs
import csv
import io
import os
import stat
from pathlib import Path

from kbsync.convert.office import convert_office
from kbsync.convert.safe_read import open_within
from kbsync.convert.text import Extracted, convert_text, decode_text, fence, normalize_newlines

SNIFF_BYTES = 8192
NO_EXTENSION = "(no extension)"
"""The ``ignored_by_kind`` key of extensionless files not read as text."""
TSV_EXTENSIONS = frozenset({".tsv", ".tab"})

# name (lowercase) of an extensionless file -> fence language; other names are plain text
NAMED_LANGUAGES: dict[str, str] = {
    "makefile": "makefile", "gnumakefile": "makefile", "dockerfile": "dockerfile",
    "containerfile": "dockerfile", "jenkinsfile": "groovy", "vagrantfile": "ruby",
    "rakefile": "ruby", "gemfile": "ruby", "justfile": "just", "cmakelists": "cmake",
}
_SECRET_NAMES = frozenset({"id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "authorized_keys",
                           "known_hosts", "credentials", "netrc", "htpasswd", "shadow",
                           "passwd", "master.key"})


def is_text_file(path: Path) -> bool:
    """Whether an extensionless file is read as text (see the module docstring).

    False for what is not a regular file or no longer exists. Opened non-blocking, so a
    FIFO never blocks discovery.

    Raises:
        OSError: it exists but cannot be read (a permission): the caller reports it.
    """
    if path.name.lower() in _SECRET_NAMES:
        return False
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with os.fdopen(open_within(path, None), "rb") as handle:
            head = handle.read(SNIFF_BYTES)
    except FileNotFoundError:
        return False
    return looks_like_text(head, complete=len(head) < SNIFF_BYTES)


def looks_like_text(head: bytes, *, complete: bool) -> bool:
    """UTF-8 without NUL bytes; a multi-byte character cut at the end of a partial
    ``head`` (``complete`` false) is allowed. Empty is not text (nothing to index)."""
    if head.startswith(codecs.BOM_UTF8):
        head = head[len(codecs.BOM_UTF8):]
    if not head.strip() or b"\x00" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return not complete and exc.reason == "unexpected end of data" and exc.start >= len(head) - 3
    return True


def convert_extensionless(data: bytes, *, name: str) -> Extracted:
    """An extensionless text file: a fenced block for the build files
    (:data:`NAMED_LANGUAGES`), plain text (reStructuredText-style titles) otherwise."""
    language = NAMED_LANGUAGES.get(Path(name).name.lower())
    if language is None:
        return convert_text(data, ext=".txt", name=name)
    text, _encoding, warnings = decode_text(data, name)
    text = normalize_newlines(text).strip("\n")
    if not text.strip():
        return Extracted("", "text", "code", warnings=warnings)
    return Extracted(fence(text, language), "text", "code", warnings=warnings)


def convert_tsv(data: bytes, *, name: str) -> Extracted:
    """A tab-separated table: the rows go through the CSV converter, so it reads as a
    Markdown table with its header repeated along long tables, as CSV does.

    Fields are split on tabs only: TSV has no quoting, so a ``"`` is kept as text.
    """
    text, _encoding, warnings = decode_text(data, name)
    rows = csv.reader(io.StringIO(normalize_newlines(text)), delimiter="\t",
                      quoting=csv.QUOTE_NONE)
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    table = convert_office(buffer.getvalue().encode("utf-8"), ext=".csv", name=name)
    return Extracted(table.markdown, table.converter, "tsv", warnings=warnings + table.warnings)
