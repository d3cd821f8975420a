"""The house keeps its architecture: wings import downwards only, siblings never import
each other, and no module imports itself back through others.

Layers, lowest first (a module may import its own wing and any lower layer):

0. ``kbsync.errors``, ``kbsync.models``, ``kbsync.settings``, ``kbsync.openai_http``,
   ``kbsync.retrying``, ``kbsync.home``
1. the floors: ``kbsync.text``, ``kbsync.convert``, ``kbsync.embed``, ``kbsync.store``;
   a floor uses another only through its interface (``*.base``) or the text tools,
   and the store none of them (it stores: the ground floor only)
2. ``kbsync.catalog``: what a collection is
3. the sibling wings ``kbsync.ingest`` and ``kbsync.query``: neither imports the other
4. ``kbsync.eval`` (never ``kbsync.ingest``)   5. ``kbsync.maintenance``
6. ``kbsync.runtime``, the composition root
7. the front doors: ``kbsync.app``, ``kbsync.api``, ``kbsync`` itself
8. ``tasks``   9. ``flows`` and ``deployments``

No module of ``kbsync/`` imports Prefect, and none imports ``tasks`` or ``flows``, with
one stated exception: the CLI (``kbsync.app``) starts Prefect runs and injects Prefect's
lock, so it may import ``tasks`` and ``flows``, inside functions only (Prefect's import
costs seconds and ``kbsync search --help`` must not pay it). The Python API
(``kbsync.api``) takes the distributed lock injected, and imports neither.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FRONT = 7
LAYERS = {
    "kbsync.errors": 0, "kbsync.models": 0, "kbsync.settings": 0, "kbsync.openai_http": 0,
    "kbsync.retrying": 0, "kbsync.home": 0,
    "kbsync.text": 1, "kbsync.convert": 1, "kbsync.embed": 1, "kbsync.store": 1,
    "kbsync.catalog": 2, "kbsync.ingest": 3, "kbsync.query": 3, "kbsync.eval": 4,
    "kbsync.maintenance": 5, "kbsync.runtime": 6,
    "kbsync.app": FRONT, "kbsync.api": FRONT, "kbsync": FRONT,
    "tasks": 8, "flows": 9, "deployments": 9,
}
FLOORS = {"kbsync.text", "kbsync.convert", "kbsync.embed", "kbsync.store"}
NEVER = {"kbsync.eval": {"kbsync.ingest"},
         # The store stores: it never embeds, chunks or reads text (the ground floor only).
         "kbsync.store": {"kbsync.text", "kbsync.embed", "kbsync.convert"}}
"""Imports the layers would allow but the architecture forbids (wing -> wings)."""
STARTS_RUNS = "kbsync.app"
"""The one part of kbsync/ that may import ``tasks`` and ``flows`` (lazily): the CLI."""


def _modules() -> dict[str, Path]:
    found = {}
    for top in ("kbsync", "tasks", "flows", "deployments"):
        for path in (ROOT / top).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _wing(module: str) -> str:
    """The longest LAYERS key that is ``module`` or a package above it."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in LAYERS:
            return ".".join(parts[:n])
    raise AssertionError(f"{module} belongs to no layer: add it to LAYERS")


def _imports(path: Path, known: dict[str, Path]):
    """(imported module, line, at module level?) for each project import of ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top_level = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known
                     else node.module for a in node.names]
        for name in names:
            if name.split(".")[0] in ("kbsync", "tasks", "flows", "deployments"):
                yield name, node.lineno, id(node) in top_level or _in_guard(tree, node)


def _in_guard(tree: ast.Module, node: ast.AST) -> bool:
    """True for an import under a module-level ``if``/``try`` (still runs at import)."""
    return any(node in ast.walk(n) for n in tree.body if isinstance(n, (ast.If, ast.Try)))


def test_every_import_points_down_or_sideways_within_a_wing() -> None:
    known = _modules()
    wrong = []
    for module, path in sorted(known.items()):
        wing = _wing(module)
        for target, line, eager in _imports(path, known):
            to = _wing(target)
            up = LAYERS[to] > LAYERS[wing]
            floors_cross = (wing in FLOORS and to in FLOORS and wing != to
                            and to != "kbsync.text" and not target.endswith(".base"))
            allowed_lazy = wing == STARTS_RUNS and to in ("tasks", "flows") and not eager
            if (up and not allowed_lazy) or floors_cross or to in NEVER.get(wing, ()):
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {module} imports {target}")
    assert not wrong, "imports that climb:\n" + "\n".join(wrong)


def test_sibling_wings_never_import_each_other() -> None:
    """Wings of one layer above the floors (ingest and query) stand side by side on the
    catalog: query never imports ingest or maintenance, ingest never imports query."""
    known = _modules()
    wrong = []
    for module, path in sorted(known.items()):
        wing = _wing(module)
        if LAYERS[wing] < 2 or LAYERS[wing] >= FRONT:
            continue
        for target, line, _ in _imports(path, known):
            to = _wing(target)
            if to != wing and LAYERS[to] == LAYERS[wing]:
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {module} imports {target}")
    assert not wrong, "sibling wings importing each other:\n" + "\n".join(wrong)


def test_query_imports_neither_ingest_nor_maintenance() -> None:
    known = _modules()
    wrong = [f"{path.relative_to(ROOT)}:{line}: {module} imports {target}"
             for module, path in sorted(known.items()) if _wing(module) == "kbsync.query"
             for target, line, _ in _imports(path, known)
             if _wing(target) in ("kbsync.ingest", "kbsync.maintenance")]
    assert not wrong, "\n".join(wrong)


def test_no_import_circles() -> None:
    """Late imports count too: a circle closed inside a function is still a circle."""
    known = _modules()
    graph = {m: {t for t, _, _ in _imports(p, known) if t in known and t != m
                 and not (_wing(m) == STARTS_RUNS and _wing(t) in ("tasks", "flows"))}
             for m, p in known.items()}
    # A package's __init__ importing its own submodules is not a circle worth reporting.
    cycles = []
    for start in graph:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph.get(node, ()):
                if nxt == start and len(path) > 1 and not _package_of(start, path):
                    cycles.append(" -> ".join(path + [start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
    assert not cycles, "import circles:\n" + "\n".join(sorted(set(cycles))[:20])


def _package_of(start: str, path: list[str]) -> bool:
    return any(start.startswith(p + ".") or p.startswith(start + ".") for p in path[1:])


def _all_imports(path: Path):
    """(top-level package, line) of every absolute import of ``path``, eager or late."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from ((a.name.split(".")[0], node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module.split(".")[0], node.lineno


def test_no_module_of_kbsync_imports_prefect() -> None:
    """Not even late: the core is plain library code; Prefect lives in tasks/ and flows/."""
    wrong = [f"{path.relative_to(ROOT)}:{line}" for path in sorted((ROOT / "kbsync").rglob("*.py"))
             for top, line in _all_imports(path) if top == "prefect"]
    assert not wrong, "kbsync/ imports prefect:\n" + "\n".join(wrong)


def test_no_module_of_kbsync_imports_tasks_or_flows_but_the_cli() -> None:
    """The distributed lock is injected (kbsync.catalog.lock.DistributedLock); only the CLI,
    which starts flow runs, reaches ``tasks`` and ``flows``, and only inside functions."""
    known = _modules()
    wrong = []
    for module, path in sorted(known.items()):
        if not module.startswith("kbsync"):
            continue
        for target, line, eager in _imports(path, known):
            if _wing(target) in ("tasks", "flows") and (
                    _wing(module) != STARTS_RUNS or eager):
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {module} imports {target}")
    assert not wrong, "\n".join(wrong)
