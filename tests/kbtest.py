"""Helpers shared by the test modules (import as ``from kbtest import ...``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample"


def write_tree(root: Path, files: dict[str, str]) -> None:
    """Create text files under root (parents made as needed), as a share's usually are:
    files 0644 and the folders made here 0755, whatever umask an opened home left
    (kbsync.home), so their permission profiles do not depend on the tests before."""
    for rel, text in files.items():
        path = root / rel
        missing = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
        path.parent.mkdir(parents=True, exist_ok=True)
        for folder in missing:
            folder.chmod(0o755)
        path.write_text(text, encoding="utf-8")
        path.chmod(0o644)


KBSYNC = str(Path(sys.executable).with_name("kbsync"))


def other_warnings(warnings: list[str]) -> list[str]:
    """``warnings`` without the owner-only one (issue 39): a share under pytest's
    ``tmp_path`` sits in root's 0700 folder, so nobody but its owner can read it and every
    run there says so, truly; tests of other warnings set that one aside."""
    return [w for w in warnings if "can be read only by their owner" not in w]


def cli_env(prefect_api: str | None, home: Path, *, drop: tuple[str, ...] = ("KBSYNC_",),
            **extra: str) -> dict[str, str]:
    """The environment of a ``kbsync`` subprocess, the one helper every test builds it with.

    This process's environment without the variables whose names start with one of ``drop``
    (in any case, as settings are read; by default every ``KBSYNC_*`` setting of the outer
    shell, so none leaks into a run; add ``"PREFECT_"`` to keep Prefect's out too), offline
    (``HF_HUB_OFFLINE=1``), Prefect's analytics off, a store under ``home``, and pointed at
    ``prefect_api`` when one is given. ``extra`` adds variables last, so it wins.
    """
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(drop)}
    env.update(KBSYNC_HOME=str(home), HF_HUB_OFFLINE="1", PREFECT_SERVER_ANALYTICS_ENABLED="false")
    if prefect_api is not None:
        env["PREFECT_API_URL"] = prefect_api
    env.update(extra)
    return env


def run_kbsync(env: dict[str, str], *args: str) -> tuple[int, dict | None, str]:
    """Run the real ``kbsync`` command: exit code, its JSON object (with ``--json``), stderr."""
    proc = subprocess.run([KBSYNC, *args], env=env, capture_output=True, text=True, timeout=600)
    data = json.loads(proc.stdout) if "--json" in args and proc.stdout.strip() else None
    return proc.returncode, data, proc.stderr


FAST = {"KBSYNC_EMBED_PROVIDER": "hash", "KBSYNC_CONVERT_ISOLATION": "false"}
"""Hash embeddings and conversion in process: a run with no model to load."""


def hash_env(prefect_api: str | None, home: Path, *, drop: tuple[str, ...] = ("KBSYNC_",),
             **extra: str) -> dict[str, str]:
    """:func:`cli_env` with :data:`FAST` (``extra`` still wins)."""
    return cli_env(prefect_api, home, drop=drop, **{**FAST, **extra})


def active_pointer(home: Path) -> dict | None:
    """The active pointer of the ``kbsync`` collection under ``home`` (None when absent)."""
    path = home / "active" / "kbsync.json"
    return json.loads(path.read_text()) if path.exists() else None


TOPICS = ["volcano", "glacier", "harbour", "orchard", "lighthouse", "canyon", "meadow",
          "reef", "tundra", "savanna", "fjord", "marsh"]


def topic_share(root: Path, n: int = len(TOPICS), *, filler: int = 0,
                sites: bool = False) -> Path:
    """``n`` Markdown files ``d{i % 3}/{topic}{i}.md``, one topic each (TOPICS cycled), each
    with ``filler`` paragraphs of pseudo-words; ``sites`` adds a sentence naming the site."""
    files = {}
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        body = f"The {topic} guide number {i}." + (
            f" Everything about the {topic}{i} site." if sites else "")
        files[f"d{i % 3}/{topic}{i}.md"] = f"# {topic} {i}\n\n{body}\n\n" + "\n\n".join(
            f"Paragraph {j}: " + " ".join(f"w{(i * 31 + j * 7 + w) % 997}" for w in range(40))
            for j in range(filler))
    write_tree(root, files)
    return root


def topic_queries(path: Path, root: str = "share", n: int = len(TOPICS)) -> Path:
    """One labelled query per file of :func:`topic_share` (JSONL), under root name ``root``."""
    lines = [json.dumps({"query": f"{TOPICS[i]} guide number {i}",
                         "relevant": [f"{root}/d{i % 3}/{TOPICS[i]}{i}.md"]}) for i in range(n)]
    path.write_text("\n".join(lines) + "\n")
    return path


def start_kbsync(env: dict[str, str], *args: str, log: Path) -> subprocess.Popen:
    """Start the real ``kbsync`` command in its own session (stdout piped, stderr to ``log``)."""
    with log.open("wb") as sink:
        return subprocess.Popen([KBSYNC, *args], env=env, stdout=subprocess.PIPE, stderr=sink,
                                start_new_session=True)


def shadow_runtime(live):
    """A rebuild's shadow runtime (``kbsync__r1``, 64-token chunks) on the live runtime's
    store (one handle per folder) and embedding service."""
    from kbsync.catalog.state import StateStore
    from kbsync.runtime import Runtime
    from kbsync.text.chunk import chunk_budget

    settings = live.settings.model_copy(update={"collection": "kbsync__r1", "chunk_tokens": 64})
    return Runtime(settings=settings, store=live.store,
                   states=StateStore(live.store, settings.state_collection),
                   service=live.service,
                   chunk_config=chunk_budget(live.service.input_fit(), tokens=64,
                                             contextual=settings.contextual_text))


def fake_openai_settings(monkeypatch, home: Path, url: str, **extra: str) -> None:
    """Leave only the ``KBSYNC_*`` settings of a run on the fake OpenAI server at ``url``
    (``tests/fake_openai.py``: 8-dimensional ``fake-embedding``, conversion in process, a
    store under ``home``); ``extra`` adds settings by name without the prefix."""
    for key in [k for k in os.environ if k.upper().startswith("KBSYNC_")]:
        monkeypatch.delenv(key)
    for key, value in {"HOME": str(home), "CONVERT_ISOLATION": "false",
                       "EMBED_PROVIDER": "openai", "EMBED_BASE_URL": url,
                       "EMBED_MODEL": "fake-embedding", "EMBED_DIMENSIONS": "8",
                       **extra}.items():
        monkeypatch.setenv(f"KBSYNC_{key}", value)


def recording_executor(ctx, **options):
    """The in-process ingest executor (:class:`kbsync.ingest.executor.InProcess`, ``options``
    passed on), recording each step it runs in ``ran`` (``here:NAME`` for those run in the
    run's own step: :meth:`~kbsync.ingest.executor.Executor.here`), each root run in
    ``roots`` and each namespace whose write lock it took in ``locked``; ``files_per_slice``
    overrides the config's."""
    from dataclasses import replace

    from kbsync.ingest.executor import InProcess

    class Recording(InProcess):
        def __init__(self) -> None:
            files_per_slice = options.pop("files_per_slice", None)
            super().__init__(ctx, **options)
            if files_per_slice is not None:
                self.config = replace(self.config, files_per_slice=files_per_slice)
            self.ran: list[str] = []
            self.roots: list[str] = []
            self.locked: list[str] = []

        def call(self, step, *args, label=""):
            self.ran.append(step.__name__)
            return super().call(step, *args, label=label)

        def submit(self, step, *args, label="", after=()):
            self.ran.append(step.__name__)
            return super().submit(step, *args, label=label, after=after)

        def here(self, step, *args, label=""):
            self.ran.append(f"here:{step.__name__}")
            return super().here(step, *args, label=label)

        def run_root(self, name, body):
            self.roots.append(name)
            return super().run_root(name, body)

        def write_lock(self, namespace):
            self.locked.append(namespace)
            return super().write_lock(namespace)

    return Recording()
