"""docs/reference/python-api.md names every public name of ``kbsync/api.py`` (its top-level
classes, functions and constants, and the public methods of ``KnowledgeBase``) and of the
``kbsync`` package (``kbsync.__all__``)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import kbsync
from kbsync import api

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reference" / "python-api.md"
NOT_API = {"log"}
"""Module-level names that are not part of the API (the module's logger)."""


def _public_names() -> list[str]:
    """Names kbsync/api.py defines at top level, without a leading underscore."""
    tree = ast.parse((ROOT / "kbsync" / "api.py").read_text(encoding="utf-8"))
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return [n for n in names if not n.startswith("_") and n not in NOT_API]


def test_every_public_name_of_the_api_module_is_documented() -> None:
    text = PAGE.read_text(encoding="utf-8")
    missing = [name for name in _public_names() if f"`{name}" not in text]
    assert not missing, f"document {missing} of kbsync/api.py in docs/reference/python-api.md"


def test_every_public_method_of_the_knowledge_base_is_documented() -> None:
    text = PAGE.read_text(encoding="utf-8")
    methods = [name for name, _ in inspect.getmembers(api.KnowledgeBase, inspect.isfunction)
               if not name.startswith("_")]
    assert methods, "KnowledgeBase has no public methods?"
    missing = [name for name in methods if f"`{name}" not in text]
    assert not missing, f"document KnowledgeBase.{missing} in docs/reference/python-api.md"


def test_every_name_of_the_package_is_documented() -> None:
    text = PAGE.read_text(encoding="utf-8")
    missing = [name for name in kbsync.__all__ if name not in text]
    assert not missing, f"document kbsync.{missing} in docs/reference/python-api.md"
