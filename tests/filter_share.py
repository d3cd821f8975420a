"""The two-root share of the query-time filter tests and what each filter must return.

Shared by ``tests/query/test_filters.py`` (in-process) and
``tests/flows/test_filters_cli_e2e.py`` (the real command).
"""

from __future__ import annotations

import os
import shutil
from datetime import date, datetime, timezone
from pathlib import Path

from kbtest import SAMPLE


def _utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()


# doc_id -> (file content or sample file to copy, mtime in UTC)
FILES = {
    "alpha/docs/intro.md": ("# Intro\n\nWelcome to the alpha documentation set.", "2024-01-10"),
    "alpha/docs/api/auth.md": ("# Auth\n\nTokens are signed with the alpha signing key.",
                               "2024-06-01"),
    "alpha/docs/api/reference.html": (SAMPLE / "engineering/api-reference.html", "2024-06-15"),
    "alpha/guide/docs/notes.md": ("# Notes\n\nA guide folder that holds a docs folder.",
                                  "2023-05-01"),
    "alpha/top.md": ("# Top\n\nA file at the root of alpha, in no folder at all.", "2024-07-01"),
    "beta/docs/policy.pdf": (SAMPLE / "policies/security-policy.pdf", "2024-02-01"),
    "beta/docs/api-old/legacy.md": ("# Legacy\n\nThe retired v1 interface of beta.",
                                    "2024-08-01"),
}
ALL = set(FILES)


def make_share(base: Path) -> Path:
    """Write :data:`FILES` under ``base`` with their mtimes; ``base``."""
    for doc_id, (content, mtime) in FILES.items():
        path = base / doc_id
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copyfile(content, path)
        else:
            path.write_text(content, encoding="utf-8")
        os.utime(path, (_utc(mtime), _utc(mtime)))
    return base


CASES = [
    ({}, ALL),
    ({"root": "beta"}, {"beta/docs/policy.pdf", "beta/docs/api-old/legacy.md"}),
    ({"path_prefix": "docs/api"}, {"alpha/docs/api/auth.md", "alpha/docs/api/reference.html"}),
    ({"path_prefix": "./docs/"}, {d for d in ALL if d.split("/", 1)[1].startswith("docs/")}),
    ({"root": "alpha", "path_prefix": "docs"},
     {"alpha/docs/intro.md", "alpha/docs/api/auth.md", "alpha/docs/api/reference.html"}),
    ({"path_prefix": "guide/docs"}, {"alpha/guide/docs/notes.md"}),
    ({"types": "pdf,html"}, {"alpha/docs/api/reference.html", "beta/docs/policy.pdf"}),
    ({"types": ["md"]}, {d for d in ALL if d.endswith(".md")}),
    ({"modified_since": "2024-06-01"},  # inclusive, midnight UTC
     {"alpha/docs/api/auth.md", "alpha/docs/api/reference.html", "alpha/top.md",
      "beta/docs/api-old/legacy.md"}),
    ({"modified_since": "2024-06-01T12:00:00+02:00"},
     {"alpha/docs/api/reference.html", "alpha/top.md", "beta/docs/api-old/legacy.md"}),
    ({"modified_since": date(2024, 7, 1), "types": "markdown"},
     {"alpha/top.md", "beta/docs/api-old/legacy.md"}),
    ({"root": "beta", "types": "html"}, set()),
]
