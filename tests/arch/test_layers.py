"""The house keeps its architecture: wings import downwards only, siblings never import
each other, and no module imports itself back through others.

Layers, lowest first (a module may import its own wing and any lower layer):

0. ``kbsync.errors``, ``kbsync.models``, ``kbsync.settings`` (and its model,
   ``kbsync.envmodel``), ``kbsync.openai_http``, ``kbsync.retrying``, ``kbsync.home``
1. the floors: ``kbsync.text``, ``kbsync.convert``, ``kbsync.embed``, ``kbsync.store``,
   ``kbsync.perms`` (who may read a file: capture and the kernel's rule);
   a floor uses another only through its interface (``*.base``) or the text tools,
   the store none of them (it stores: the ground floor only), and the text tools not
   the store (the sparse vector they make is a ground-floor record, ``kbsync.models``).
   Inside the store, the shared modules (interface, validation, active pointer, segment
   layout) sit beneath its two adapters, ``kbsync.store.edge`` and ``kbsync.store.server``,
   and load neither at import; the adapters never import each other
2. ``kbsync.catalog``: what a collection is
3. the sibling wings ``kbsync.ingest`` and ``kbsync.query``: neither imports the other
4. ``kbsync.eval`` (never ``kbsync.ingest``)   5. ``kbsync.maintenance``
6. ``kbsync.runtime``, the composition root, and ``kbsync.serve`` (the server's handler and
   doors, issue 40: below the CLI that starts it, beside the runtime it never imports)
7. the front doors: ``kbsync.app``, ``kbsync.api``, ``kbsync.mcp_server`` (``kbsync mcp``),
   ``kbsync`` itself
8. ``tasks``   9. ``flows`` and ``deployments``

No module of ``kbsync/`` imports Prefect, and none imports ``tasks`` or ``flows``, with
one stated exception: the CLI (``kbsync.app``) starts Prefect runs and injects Prefect's
lock, so it may import ``tasks`` and ``flows``, inside functions only (Prefect's import
costs seconds and ``kbsync search --help`` must not pay it). The Python API
(``kbsync.api``) imports neither: its lock decision is the CLI's helper
(``kbsync.app.locks``), and only the doors decide it (issue 36).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FRONT = 7
LAYERS = {
    "kbsync.errors": 0, "kbsync.models": 0, "kbsync.settings": 0, "kbsync.openai_http": 0,
    "kbsync.retrying": 0, "kbsync.home": 0, "kbsync.envmodel": 0,
    "kbsync.text": 1, "kbsync.convert": 1, "kbsync.embed": 1, "kbsync.store": 1,
    "kbsync.perms": 1, "kbsync.catalog": 2, "kbsync.ingest": 3, "kbsync.query": 3, "kbsync.eval": 4,
    "kbsync.maintenance": 5, "kbsync.runtime": 6, "kbsync.serve": 6,
    "kbsync.app": FRONT, "kbsync.api": FRONT, "kbsync.mcp_server": FRONT, "kbsync": FRONT,
    "tasks": 8, "flows": 9, "deployments": 9,
}
FLOORS = {"kbsync.text", "kbsync.convert", "kbsync.embed", "kbsync.store", "kbsync.perms"}
NEVER = {"kbsync.eval": {"kbsync.ingest"},
         # The store stores: it never embeds, chunks or reads text (the ground floor only).
         "kbsync.store": {"kbsync.text", "kbsync.embed", "kbsync.convert"},
         # SparseVec is a ground-floor record: the text tools make them, the store keeps them.
         "kbsync.text": {"kbsync.store"}}
"""Imports the layers would allow but the architecture forbids (wing -> wings)."""
STARTS_RUNS = "kbsync.app"
"""The one part of kbsync/ that may import ``tasks`` and ``flows`` (lazily): the CLI."""
STORE_ADAPTERS = ("kbsync.store.edge", "kbsync.store.server")
"""The store's rooms: the embedded adapter (engine, relay, disk space) and the server adapter.
Every other module of ``kbsync/store/`` is shared by both (``base``, ``validate``, ``active``,
``layout``)."""
MAX_LINES = 450
"""No module of the code grows past this (the house's rule: ~400, at most 450)."""


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


DECIDES_LOCKS = ("kbsync/app/", "kbsync/api.py", "flows/", "tasks/locking.py")
"""The front doors: they alone decide whether the distributed lock is taken
(:mod:`kbsync.catalog.lock`'s rule); everything below receives a ``WriteLocks``."""
DECISION_NAMES = {"prefect_limit", "prefect_lock", "write_locks", "flow_locks", "run_lock",
                  "distributed_in_use"}
"""The distributed lock itself and the doors' helpers that decide it."""
RECEIVES_LOCKS = ("flows/rebuild_executor.py",)
"""Modules under the doors' folders that are no door: the rebuild's Prefect executor holds
the decision its flow hands it (``flows/rebuild.py`` decides, with ``flow_locks``)."""
LOCK_POLICY = "kbsync/catalog/lock.py"
"""The one policy: the only module that calls ``ingest_lock`` (``WriteLocks.hold``)."""


def _lock_decisions(tree: ast.Module, *, below_doors: bool):
    """(line, what) for each place in ``tree`` that decides the distributed lock."""
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)
                  and isinstance(n.value, ast.Constant)}
    for node in ast.walk(tree):
        name = (node.id if isinstance(node, ast.Name) else
                node.attr if isinstance(node, ast.Attribute) else
                node.name if isinstance(node, ast.alias) else None)
        if name in DECISION_NAMES:
            yield getattr(node, "lineno", 0), f"uses {name}"
        if isinstance(node, ast.Call):
            callee = node.func.id if isinstance(node.func, ast.Name) else \
                node.func.attr if isinstance(node.func, ast.Attribute) else None
            keywords = {k.arg for k in node.keywords}
            if callee == "WriteLocks" and (len(node.args) > 1 or "distributed" in keywords):
                yield node.lineno, "builds WriteLocks with a distributed lock"
            if below_doors and callee == "ingest_lock":
                yield node.lineno, "calls ingest_lock (a writer holds its WriteLocks.hold)"
        if (below_doors and isinstance(node, ast.Constant) and node.value == "PREFECT_API_URL"
                and id(node) not in docstrings):
            yield node.lineno, "reads PREFECT_API_URL"


def test_only_the_front_doors_decide_the_distributed_lock() -> None:
    """The one lock rule (issue 36): the CLI, the Python API and the flows decide once whether
    the distributed lock is taken (``kbsync.app.locks.write_locks``,
    ``tasks.locking.flow_locks``); runners, repair, removal, rollback and restore receive the
    decision. Below the doors nothing names Prefect's lock, reads ``PREFECT_API_URL`` or
    calls ``ingest_lock``: every writer (the rebuild's executors too) holds the
    ``WriteLocks`` it was handed, and only the policy itself calls ``ingest_lock``."""
    wrong = []
    for module, path in sorted(_modules().items()):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(DECIDES_LOCKS) and rel not in RECEIVES_LOCKS:
            continue
        below = LAYERS[_wing(module)] < FRONT or rel in RECEIVES_LOCKS
        tree = ast.parse(path.read_text(encoding="utf-8"))
        wrong += [f"{rel}:{line}: {what}" for line, what in _lock_decisions(tree, below_doors=below)
                  if not (rel == LOCK_POLICY and "ingest_lock" in what)]
    assert not wrong, "the lock decided below the front doors:\n" + "\n".join(sorted(wrong))


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


def _adapter(module: str) -> str | None:
    return next((a for a in STORE_ADAPTERS if module == a or module.startswith(a + ".")), None)


def test_the_store_adapters_stand_apart_on_a_shared_floor() -> None:
    """Importing the interface loads no engine: the shared modules of ``kbsync/store/``
    import an adapter only inside a function (``open_store``, the active pointer on a
    server), and one adapter never imports the other, not even inside a function (what
    both need, such as the seal layout, is on the shared floor: ``kbsync.store.layout``),
    so a server run never loads qdrant_edge."""
    known = _modules()
    wrong = []
    for module, path in sorted(known.items()):
        if not (module == "kbsync.store" or module.startswith("kbsync.store.")):
            continue
        home = _adapter(module)
        for target, line, eager in _imports(path, known):
            to = _adapter(target)
            if to and to != home and (eager or home is not None):
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {module} imports {target}")
    assert not wrong, "the store's shared floor or an adapter loads another adapter:\n" + \
        "\n".join(wrong)


def test_the_store_rooms_exist() -> None:
    """The table above names real packages (a rename must update it)."""
    known = _modules()
    assert all(a in known for a in STORE_ADAPTERS), [a for a in STORE_ADAPTERS if a not in known]


def test_no_module_is_longer_than_the_house_allows() -> None:
    """Modules of a few hundred lines (docs/development.md, Layout): one over ``MAX_LINES``
    is split along a seam (as ``kbsync.text.budget`` left ``kbsync.text.chunk``)."""
    long = sorted(f"{path.relative_to(ROOT)}: {n} lines"
                  for path in _modules().values()
                  if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES)
    assert not long, f"modules over {MAX_LINES} lines:\n" + "\n".join(long)


SEQUENCE_STEPS = {"run_ingest", "evaluate", "evaluate_collection", "check_before_build",
                  "prepare_shadow", "state_check", "decide", "swap", "discard", "plan_rebuild",
                  "choose_shadow", "live_settings", "run_lock", "ingest_lock", "write_lock"}
"""The rebuild's steps and locks: the runner (``kbsync.maintenance.rebuild_runner``) calls
them, in its one order; the flow and its executor do not arrange them."""


def _called(path: Path) -> set[str]:
    """The names ``path`` calls (``f(...)`` and ``x.f(...)``)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                names.add(func.id)
            elif isinstance(func, ast.Attribute):
                names.add(func.attr)
    return names


def test_the_rebuild_flow_runs_the_runner_and_holds_no_sequence_of_its_own() -> None:
    """``flows/rebuild.py`` reads like ``flows/ingest.py``: parameters -> request ->
    ``run_rebuild`` on the Prefect executor -> artifacts. The order of the steps and the lock
    scope live once, in the runner, so the flow and the plain call cannot drift."""
    called = _called(ROOT / "flows" / "rebuild.py")
    assert "run_rebuild" in called
    assert "flow_locks" in called  # the flow is the door: it decides the lock, once
    assert not called & SEQUENCE_STEPS, sorted(called & SEQUENCE_STEPS)
    # The executor says where a step runs, never what runs next: no rule of the rebuild
    # and no ingest of its own (the runner calls run_ingest on the executor it is handed).
    executor = _called(ROOT / "flows" / "rebuild_executor.py")
    assert not executor & {"run_ingest", "decide", "plan_rebuild", "choose_shadow",
                           "live_settings", "lock_scope"}, sorted(executor)


STATE_NAME_HOME = ("kbsync/catalog/", "kbsync/settings.py")
"""Where the state collection's name may be spelled: its one definition
(:meth:`kbsync.settings.Settings.state_collection_of`) and the catalog, which says what a
collection is."""


def _spells_state_name(node: ast.AST) -> bool:
    """``f"{name}_state"``, ``name + "_state"``, ``"{}_state".format(...)``, ``"%s_state" % ...``."""
    if isinstance(node, ast.JoinedStr):
        parts = node.values
        return any(isinstance(a, ast.FormattedValue) and isinstance(b, ast.Constant)
                   and isinstance(b.value, str) and b.value.startswith("_state")
                   for a, b in zip(parts, parts[1:]))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        right = node.right
        return isinstance(right, ast.Constant) and isinstance(right.value, str) \
            and right.value.startswith("_state")
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return any(f"{hole}_state" in node.value for hole in ("{}", "%s", "{0}"))
    return False


def test_only_the_catalog_spells_the_state_collections_name() -> None:
    """A second spelling of ``<collection>_state`` drifts from the first the day one changes:
    every module outside the catalog asks ``Settings.state_collection_of(name)`` (or
    ``settings.state_collection``)."""
    wrong = []
    for module, path in sorted(_modules().items()):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(STATE_NAME_HOME):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if _spells_state_name(node):
                wrong.append(f"{rel}:{node.lineno}: spells the state collection's name")
    wrong.sort()
    assert not wrong, ("use kbsync.settings.Settings.state_collection_of(name):\n"
                       + "\n".join(wrong))
