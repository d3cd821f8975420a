"""Both adapters index ``access`` and filter on it alike: the embedded engine and
qdrant-client (local mode, standing in for a Qdrant server) give every reader the kernel's
view (issue 39). Uses Debian's own ``nobody`` and ``daemon`` users."""

from __future__ import annotations

import os
import pwd
import shutil

import pytest

from kbsync.ingest.runner import run_plain
from kbsync.models import RootSpec
from kbsync.query.request import SearchRequest
from kbsync.query.search import search
from kbsync.query.stats import collect_stats
from perm_users import kernel_readable, open_folder


@pytest.fixture
def share():
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        pytest.skip("needs root (chown) and runuser")
    for user in ("nobody", "daemon"):
        try:
            pwd.getpwnam(user)
        except KeyError:
            pytest.skip(f"no {user} user here")
    with open_folder("kbsync-perms-adapters") as base:
        root = base / "share"
        (root / "closed").mkdir(parents=True)
        root.chmod(0o755)
        files = {"open.md": 0o644, "mine.md": 0o600, "daemons.md": 0o640, "closed/in.md": 0o644}
        for rel, mode in files.items():
            path = root / rel
            path.write_text(f"# {rel}\n\nvolcano notes of {rel}.\n", encoding="utf-8")
            path.chmod(mode)
        shutil.chown(root / "daemons.md", "root", "daemon")
        (root / "closed").chmod(0o700)
        yield root, [root / rel for rel in files]


def test_each_adapter_filters_every_reader_as_the_kernel_does(adapter_runtime, share) -> None:
    root, files = share
    runtime = adapter_runtime
    summary = run_plain([RootSpec(name="share", path=root)], runtime=runtime)
    assert summary.added == 4 and summary.owner_only == 2  # mine.md; closed/in.md (its folder)
    for user in ("nobody", "daemon"):
        expected = {f"share/{p.relative_to(root).as_posix()}" for p in kernel_readable(user, files)}
        for mode in ("dense", "hybrid"):
            result = search(SearchRequest(query="volcano notes", k=10, mode=mode, as_user=user),
                            store=runtime.store, service=runtime.service,
                            collection=runtime.collection)
            assert {hit.doc_id for hit in result.results} == expected, (user, mode)
        stats = collect_stats(runtime.store, runtime.settings, "default", as_user=user)
        assert stats["namespaces"]["default"]["documents"] == len(expected)
    everything = search(SearchRequest(query="volcano notes", k=10), store=runtime.store,
                        service=runtime.service, collection=runtime.collection)
    assert len(everything.results) == 4  # root, unfiltered
