"""Pointers from the code to the docs lead somewhere (issue 36): a message or comment that cites
a README section names a heading the README has, a cited page (``docs/....md``,
``tests/bench/README.md``, with an optional ``#anchor``) exists, anchor included, and so does
a cited test module (``tests/....py``).

Only the code is scanned (``kbsync/``, ``tasks/``, ``flows/``, ``deployments/``); the links of
the README and the docs are ``test_front_door.py``'s. Text is read with its whitespace collapsed,
so a citation wrapped over two lines is still seen."""

from __future__ import annotations

import re
from pathlib import Path

from test_front_door import README, ROOT, anchors

CODE_DIRS = ("kbsync", "tasks", "flows", "deployments")
SECTION = re.compile(r"""\bREADME(?:,|'s)\s+["`*]?([A-Za-z][^)\].,:;"`*]*)""")
"""``README, X``, ``README's X`` or ``README, "X"``: X runs to the next punctuation."""
PAGE = re.compile(r"""(?<![\w./`'"-])((?:docs|tests/bench)/[\w./-]*?\.md)(?:#([\w-]+))?""")
"""A repository-relative Markdown page, optionally with an anchor; one in quotes or backquotes
(``"docs/api/x.md"``, a path in a share) is an example, not a pointer."""
TEST_FILE = re.compile(r"(?<![\w./-])(tests/[\w/-]+\.py)")
"""A test module named as the one that checks a rule ("Tested by ``tests/...``"): tests move."""


def sources() -> list[Path]:
    """Every Python file of the code that the pointers come from."""
    return sorted(p for d in CODE_DIRS for p in (ROOT / d).rglob("*.py")
                  if "__pycache__" not in p.parts)


def readme_headings() -> list[str]:
    """The README's headings, lowercased, outside code fences."""
    found, fenced = [], False
    for line in README.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            found.append(line.lstrip("#").strip().lower())
    return found


def cited_sections(text: str) -> list[str]:
    """The README sections a text cites by name."""
    return [m.group(1).strip() for m in SECTION.finditer(re.sub(r"\s+", " ", text))]


def cited_pages(text: str) -> list[tuple[str, str]]:
    """``(page, anchor)`` of each page a text cites (anchor ``""`` when none)."""
    return [(m.group(1), m.group(2) or "") for m in PAGE.finditer(text)]


def names_a_heading(section: str, headings: list[str]) -> bool:
    """A citation may shorten a heading to its first words ("Formats" for "Formats and
    failures"), never name another."""
    wanted = section.lower()
    return any(h == wanted or h.startswith(wanted + " ") for h in headings)


def test_the_patterns_see_what_they_should() -> None:
    assert cited_sections('see README, Formats) and (README\'s configuration table). '
                          '(see README, "Retrieval\n    quality")') == [
        "Formats", "configuration table", "Retrieval quality"]
    assert cited_sections("a share's ``README`` or ``LICENSE``; README.md; see README)") == []
    assert cited_pages("(docs/models.md#e5-on-onnx-runtime) and tests/bench/README.md, "
                       "docs/decisions/ and mydocs/x.md, ``docs/api/x.md``") == [
        ("docs/models.md", "e5-on-onnx-runtime"), ("tests/bench/README.md", "")]
    assert TEST_FILE.findall("Tested by ``tests/catalog/test_lock.py``, mytests/x.py") == [
        "tests/catalog/test_lock.py"]
    assert names_a_heading("Commands", ["commands"])
    assert names_a_heading("configuration", ["configuration"])
    assert not names_a_heading("Formats", ["commands", "formatsx"])


def test_every_pointer_of_the_code_resolves() -> None:
    headings, broken = readme_headings(), []
    for path in sources():
        text, where = path.read_text(encoding="utf-8"), path.relative_to(ROOT)
        broken += [f"{where}: README section {s!r} (no such heading in README.md)"
                   for s in cited_sections(text) if not names_a_heading(s, headings)]
        for page, anchor in cited_pages(text):
            target = ROOT / page
            if not target.is_file():
                broken.append(f"{where}: {page} (no such file)")
            elif anchor and anchor not in anchors(target):
                broken.append(f"{where}: {page}#{anchor} (no heading #{anchor})")
        broken += [f"{where}: {test} (no such file)" for test in TEST_FILE.findall(text)
                   if not (ROOT / test).is_file()]
    assert not broken, "pointers to nowhere:\n" + "\n".join(broken)
