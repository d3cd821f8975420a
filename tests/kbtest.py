"""Helpers shared by the test modules (import as ``from kbtest import ...``)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample"


def write_tree(root: Path, files: dict[str, str]) -> None:
    """Create text files under root (parents made as needed)."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
