"""Limits that must not mislead (issue 22): a workbook over the memory limit, HTML nested 200k deep.

* A sound xlsx that needs more memory than the conversion worker may take was reported as
  ``CorruptDocument`` ("converter crashed"): the worker's MemoryError handler ran while the
  failed conversion's frames still held the memory, so its report failed and it died. It is
  now ``MemoryLimitExceeded``, naming the limit and ``KBSYNC_CONVERT_MEMORY_MB``.
* 200,000 nested ``<div>`` elements ended as ``EmptyDocument`` ("no text"): the HTML library
  skips everything below 1024 levels. The tags below 256 levels are now dropped and the text
  down there kept, with a warning.
"""

from __future__ import annotations

import resource
import time
from pathlib import Path

import pytest

from kbsync.convert import convert
from kbsync.convert.html_depth import MAX_DEPTH, flatten_deep
from kbsync.convert.isolate import IsolatedConverter
from kbsync.errors import CorruptDocument, ErrorCode, MemoryLimitExceeded, PermanentError
from kbsync.models import Document

POOL_MB = 2048  # KBSYNC_CONVERT_MEMORY_MB's default
MARGIN_MB = 160  # room left to the conversion: far less than the workbook needs


# Targets run inside the workers (module level, so they can be imported there).
def _tighten() -> None:
    """Lower this worker's address-space limit to what it uses now + MARGIN_MB.

    The workers' own size varies with when they were forked (the forkserver's native
    threads take malloc arenas some seconds after it starts: ~280 MiB here), so a limit
    fixed in advance is either too tight for the next fresh worker or too loose for the file.
    The worker is replaced after the MemoryError, and the next one has the pool's limit.
    """
    status = Path("/proc/self/status").read_text()
    kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmSize:"))
    limit = (kib // 1024 + MARGIN_MB) * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def tight_convert(path: Path, *, doc_id: str, max_bytes: int, **options) -> Document:
    """:func:`convert`, under a tight memory limit for workbooks."""
    if path.suffix == ".xlsx":
        _tighten()
    return convert(path, doc_id=doc_id, max_bytes=max_bytes, **options)


def hoard(path: Path, *, doc_id: str, max_bytes: int, **options) -> Document:
    """Allocate until MemoryError, every block still referenced by this frame (as a
    converter's half-built tables are) when the error leaves it; else convert."""
    if path.name == "hoard.txt":
        _tighten()
        blocks = []
        while True:
            blocks.append(bytearray(2**20))
    return convert(path, doc_id=doc_id, max_bytes=max_bytes, **options)


def _workbook(path: Path, rows: int) -> Path:
    openpyxl = pytest.importorskip("openpyxl")
    book = openpyxl.Workbook(write_only=True)
    sheet = book.create_sheet("Orders")
    sheet.append(["id", "customer", "city", "amount", "note"])
    for i in range(rows):
        sheet.append([i, f"customer {i}", ("Oslo", "Bergen", "Tromsø")[i % 3], i * 1.5,
                      f"order note number {i * 7919 % 100003}"])
    book.save(path)
    return path


@pytest.mark.slow  # 30-75 s on 4 workers (docs/development.md, Tests)
def test_a_sound_workbook_over_the_memory_limit_is_named_so_not_corrupt(tmp_path):
    book = _workbook(tmp_path / "orders.xlsx", rows=60_000)  # ~1.9 MiB; needs far more than MARGIN_MB
    small = tmp_path / "ok.md"
    small.write_text("# Fine\n\nA small file after the big one.\n")
    with IsolatedConverter(workers=1, timeout_s=300, memory_mb=POOL_MB, target=tight_convert) as pool:
        with pytest.raises(MemoryLimitExceeded) as info:
            pool.convert(book, doc_id="s/orders.xlsx")
        assert "Fine" in pool.convert(small, doc_id="s/ok.md").markdown  # a fresh worker
    message = str(info.value)
    assert not isinstance(info.value, CorruptDocument)
    assert info.value.kind is ErrorCode.MemoryLimitExceeded and isinstance(info.value, PermanentError)
    assert "orders.xlsx" in message and f"{POOL_MB} MiB memory limit" in message
    assert "KBSYNC_CONVERT_MEMORY_MB" in message and "\n" not in message


def test_memory_held_by_the_failed_conversion_does_not_turn_into_a_crash(tmp_path):
    (tmp_path / "hoard.txt").write_text("x")
    (tmp_path / "ok.txt").write_text("after the hoard")
    with IsolatedConverter(workers=1, timeout_s=120, memory_mb=POOL_MB, target=hoard) as pool:
        with pytest.raises(MemoryLimitExceeded, match="KBSYNC_CONVERT_MEMORY_MB"):
            pool.convert(tmp_path / "hoard.txt", doc_id="s/hoard.txt")
        assert pool.convert(tmp_path / "ok.txt", doc_id="s/ok.txt").markdown == "after the hoard"


DEPTH = 200_000
MARKS = {0: "surface alpha", 100: "shallow bravo", 1_500: "below the library charlie",
         50_000: "deep delta", DEPTH - 1: "bottom echo"}


def _nested(depth: int, marks: dict[int, str]) -> str:
    parts = ["<html><head><title>Deep page</title></head><body>"]
    for level in range(depth):
        parts.append("<div>")
        if level in marks:
            parts.append(f"<p>{marks[level]} text</p>")
    parts.append("</div>" * depth)
    parts.append("</body></html>")
    return "".join(parts)


def test_200k_nested_divs_yield_their_text_at_every_depth_with_a_warning(tmp_path):
    path = tmp_path / "deep.html"
    path.write_text(_nested(DEPTH, MARKS))
    start = time.monotonic()
    doc = convert(path, doc_id="s/deep.html")
    assert time.monotonic() - start < 60
    for text in MARKS.values():
        assert f"{text} text" in doc.markdown, doc.markdown[:500]
    assert doc.markdown.index("surface alpha") < doc.markdown.index("bottom echo")
    assert doc.title == "Deep page"
    assert any(f"{DEPTH} levels deep" in w and f"below level {MAX_DEPTH}" in w
               for w in doc.warnings), doc.warnings


def test_text_only_at_the_bottom_of_200k_divs_is_not_an_empty_document(tmp_path):
    path = tmp_path / "bottom.html"
    path.write_text("<div>" * DEPTH + "needle at the bottom" + "</div>" * DEPTH)
    doc = convert(path, doc_id="s/bottom.html")
    assert doc.markdown == "needle at the bottom"
    assert len(doc.warnings) == 1 and "levels deep" in doc.warnings[0]


def test_pages_within_the_limit_are_left_alone(tmp_path):
    page = "<h1>Title</h1>" + "<p>para" * 2_000 + "<ul><li>item" * 50 + "</ul>" * 50
    path = tmp_path / "ok.html"
    path.write_text(page)
    doc = convert(path, doc_id="s/ok.html")
    assert doc.warnings == [] and doc.markdown.startswith("# Title")
    assert flatten_deep(page) == (page, 50)  # only the <ul>s count: <p> and <li> close themselves


def test_flattening_keeps_every_character_outside_the_dropped_tags():
    text = ("<div class='a>b'>" * 5 + "x<!-- <div> -->y<script>if (a<b) {'<div>'}</script>"
            + "<br><img src=a.png/>z" + "</div>" * 5)
    flat, deepest = flatten_deep(text, limit=2)
    assert deepest == 5
    # two opens and two ends kept; the comment's and the script's <div> are text
    assert flat.count("<div") == 2 + 2 and flat.count("</div>") == 2
    assert "x<!-- <div> -->y<script>if (a<b) {'<div>'}</script><br><img src=a.png/>z" in flat
