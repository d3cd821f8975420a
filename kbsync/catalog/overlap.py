"""Whether a root's folder overlaps the folder a root NAME is bound to (symlinks resolved).

Two overlapping roots index the same files under two doc_ids. Within one run
:func:`kbsync.catalog.identity.check_roots` compares the roots given; across runs only the
bindings remember what was synced, so :func:`overlapping_bindings` compares against them.
"""

from __future__ import annotations

import os
from pathlib import PurePath

from kbsync.models import RootSpec, display_path


def overlapping_bindings(spec: RootSpec, bound: dict[str, str]) -> list[tuple[str, str]]:
    """``(name, path)`` of each binding under another NAME whose folder is the root's
    folder, an ancestor or a descendant of it (symlinks resolved on both sides).

    ``bound`` is root NAME -> bound path text (resolved when it was bound).
    """
    mine = PurePath(display_path(spec.path))
    found = []
    for name, text in sorted(bound.items()):
        if name == spec.name:
            continue  # the NAME's own binding: the rebind rule of identity.check_run
        if any(_nested(mine, other) for other in _bound_forms(text)):
            found.append((name, text))
    return found


def _bound_forms(text: str) -> set[PurePath]:
    """The bound path as recorded (resolved then) and as it resolves now, when it exists."""
    forms = {PurePath(text)}
    if os.path.isdir(text):
        forms.add(PurePath(display_path(os.path.realpath(text))))
    return forms


def _nested(one: PurePath, other: PurePath) -> bool:
    """The same folder, or one inside the other."""
    return one == other or one in other.parents or other in one.parents
