"""The README is a front door (issue 26): short, its two commands the ones that run, and every
link of it and of the docs leads somewhere that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_README_LINES = 200
PENDING = {"docs/decisions/model-per-language.md"}
"""Pages another change writes; linked from the docs map already, so not checked yet."""


def pages() -> list[Path]:
    """The README, every page under docs/ and the benchmarks' page."""
    return [README, *sorted((ROOT / "docs").rglob("*.md")), ROOT / "tests" / "bench" / "README.md"]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Anchors of the headings of a Markdown page (outside code fences)."""
    found, fenced = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            found.add(slug(line.lstrip("#")))
    return found


def links(path: Path):
    """``(target, line number)`` of each relative Markdown link of a page, outside code."""
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"`[^`]*`", "", line)):
            if not target.startswith(("http://", "https://", "mailto:")):
                yield target, number


CI_MARKER = "# The README's test command (keep the two identical)"


def test_the_readme_is_at_most_200_lines() -> None:
    count = len(README.read_text(encoding="utf-8").splitlines())
    assert count <= MAX_README_LINES, f"README.md has {count} lines; move detail into docs/"


def test_the_readme_test_command_is_what_ci_runs() -> None:
    """.ci/run runs the README's test command (the line after its marker comment), then
    the slow tier, and nothing after that."""
    lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()
    (marker,) = [i for i, line in enumerate(lines) if line.startswith(CI_MARKER)]
    assert lines[marker + 1] in README.read_text(encoding="utf-8").splitlines(), (
        "README.md must show the line after .ci/run's marker comment as its test command")
    assert lines[marker + 1].endswith("pytest -q"), "the README's command runs the default tier"
    assert lines[-1] == ".venv/bin/python -m pytest -q -m slow", ".ci/run ends with the slow tier"


def test_the_readme_main_job_is_one_command() -> None:
    text = README.read_text(encoding="utf-8")
    assert ("python3 -m venv .venv && .venv/bin/pip install -q -c constraints.txt -e . && "
            ".venv/bin/kbsync ingest data/sample && .venv/bin/kbsync search "
            "\"how do I rotate API keys\"") in text.splitlines()


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target, number in links(page):
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        relative = resolved.relative_to(ROOT).as_posix() if resolved.is_relative_to(ROOT) else ""
        if relative in PENDING:
            continue
        if not resolved.exists():
            broken.append(f"line {number}: {target} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"line {number}: {target} (no heading #{anchor})")
    assert not broken, f"{page.relative_to(ROOT)}:\n" + "\n".join(broken)


def test_every_docs_page_is_reachable_from_the_readme() -> None:
    """No orphan page: each docs/ page is linked from the README or from a page it links."""
    seen, todo = set(), [README]
    while todo:
        page = todo.pop()
        if page in seen or not page.exists() or page.suffix != ".md":
            continue
        seen.add(page)
        for target, _ in links(page):
            path_part = target.partition("#")[0]
            if path_part:
                todo.append((page.parent / path_part).resolve())
    orphans = [p.relative_to(ROOT).as_posix() for p in pages() if p.resolve() not in seen]
    assert not orphans, f"pages no link leads to: {orphans}"
