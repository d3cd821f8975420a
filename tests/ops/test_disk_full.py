"""A full disk under KBSYNC_HOME is a ``DiskFull`` line, never a SIGBUS (issue 10.5).

The embedded engine writes through memory-mapped files, so on a full file system it
dies from SIGBUS (exit 135, no message), and on tmpfs even *opening* a store for
``kbsync stats`` touches unallocated pages. These tests fill real small tmpfs mounts
(root only: they skip, saying why, where mounting is not allowed) and run the real
``kbsync`` command against a real Prefect server.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kbtest import REPO, cli_env, hash_env, write_tree

KBSYNC = str(Path(sys.executable).with_name("kbsync"))
MIB = 2**20
SIGBUS_CODES = (135, -7)
FILES = 300  # the shell's 128 + SIGBUS, subprocess's -SIGBUS

# Root mounts tmpfs filesystems and fills them: 10-31 s of CLI runs on 4 workers.
pytestmark = pytest.mark.slow


def _share_gen():
    spec = importlib.util.spec_from_file_location("share_gen",
                                                  REPO / "tests" / "bench" / "share_gen.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def tmpfs(tmp_path):
    """``mount(size_mb)`` -> a fresh tmpfs mount point (unmounted at teardown)."""
    mounted: list[Path] = []

    def mount(size_mb: int) -> Path:
        if sys.platform != "linux" or os.geteuid() != 0:
            pytest.skip("needs root on Linux to mount a small tmpfs (the disk this test fills)")
        point = tmp_path / f"tmpfs{len(mounted)}"
        point.mkdir()
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs",
                               str(point)], capture_output=True, text=True)
        if proc.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip() or proc.returncode}")
        mounted.append(point)
        return point

    yield mount
    for point in reversed(mounted):
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def kbsync(env, *args: str, timeout: float = 300) -> tuple[int, str, str]:
    proc = subprocess.run([KBSYNC, *args], env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    assert proc.returncode not in SIGBUS_CODES, f"kbsync {args[0]} died from SIGBUS"
    return proc.returncode, proc.stdout, proc.stderr


def _disk_full_line(code: int, err: str) -> str:
    """The one error line of a DiskFull exit (before it, only warnings: a cache write that
    failed on the full disk is one)."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1 and lines, (code, err[-3000:])
    assert all(line.startswith("WARNING ") for line in lines[:-1]), err[-3000:]
    assert "DiskFull" in lines[-1] and " free, " in lines[-1] and "needed" in lines[-1], lines
    return lines[-1]


def _ballast(path: Path, size: int) -> None:
    """A file taking ``size`` bytes of real space (tmpfs supports fallocate)."""
    with path.open("wb") as out:
        if size > 0:
            os.posix_fallocate(out.fileno(), 0, size)


def _fill(path: Path) -> None:
    """Take every byte left on ``path``'s file system."""
    from kbsync.store.edge.diskspace import free_bytes

    with path.open("wb") as out:
        chunk = b"\0" * MIB
        try:
            while free_bytes(path) > 0:
                out.write(chunk if free_bytes(path) >= MIB else b"\0" * 4096)
                out.flush()
        except OSError:  # ENOSPC: full, as wanted
            pass


def _index(home: Path) -> tuple[dict, list]:
    """(doc_id -> (content_hash, chunk_count, status), sorted point ids) of a store.

    Also asserts the store is consistent: each state record has exactly its points.
    """
    from kbsync.catalog.state import StateStore
    from kbsync.store.base import Filter
    from kbsync.store.edge.store import EdgeStore

    with EdgeStore(home / "qdrant") as store:
        states = StateStore(store, "kbsync_state").load("default")
        for doc_id, state in states.items():
            count = store.count("kbsync", Filter.where(namespace="default", doc_id=doc_id))
            assert count == state.chunk_count, doc_id
        ids = sorted(p.id for p in store.scroll("kbsync", with_payload=False))
    assert len(ids) == sum(s.chunk_count for s in states.values()), "orphan points"
    return ({d: (s.content_hash, s.chunk_count, s.status.value) for d, s in states.items()},
            ids)


def test_batch_estimate_bounds_what_the_engine_allocates(runtime, tmp_path):
    """ENGINE_FACTOR and the per-chunk estimate are an upper bound, and not a wild one."""
    from kbsync.ingest.plan import plan_root
    from kbsync.ingest.room import write_batch
    from kbsync.store.edge import diskspace
    from kbsync.ingest.discover import parse_root
    from kbsync.text.sparse import term_bound
    from kbsync.ingest.stages import chunk_stage, convert_stage, embed_stage
    from kbsync.models import SyncMode

    share = tmp_path / "share"
    _share_gen().generate(share, 150, seed=3)
    runtime.ensure_collection()
    runtime.states.load("default")
    rp = plan_root(parse_root(str(share)), runtime=runtime, namespace="default",
                          mode=SyncMode.INCREMENTAL)
    converted = convert_stage(rp.to_process(), max_bytes=2**27, converter=runtime.converter())
    embedded = embed_stage(chunk_stage(converted.work, config=runtime.chunk_config).work,
                           service=runtime.service)
    estimate = diskspace.estimate_batch(
        (([c.text for c in w.chunks], len(str(w.source.path)), [c.heading_path for c in w.chunks])
         for w in embedded.work), dimension=384, sparse_terms=term_bound)

    def allocated() -> int:
        return sum(p.lstat().st_blocks * 512 for p in runtime.settings.store_path.rglob("*")
                   if p.is_file())

    before = allocated()
    written = write_batch(embedded.work, runtime, namespace="default",
                                 run_id="r1")
    used = allocated() - before
    assert written.counters["added"] == estimate.documents > 100
    assert used <= estimate.store <= 3 * used, (used, estimate)


def test_small_tmpfs_refuses_before_writing(tmpfs, prefect_api, tmp_path):
    """The issue's reproduction: a 20 MiB tmpfs. One DiskFull line, exit 1, nothing written."""
    mount = tmpfs(20)
    share = tmp_path / "share"
    _share_gen().generate(share, 200)
    env = cli_env(prefect_api, mount / "home", KBSYNC_EMBED_PROVIDER="hash")
    code, _, err = kbsync(env, "ingest", str(share))
    line = _disk_full_line(code, err)
    assert str(mount / "home") in line
    code, out, err = kbsync(env, "stats", "--json")  # nothing there: a read never crashes
    assert code in (0, 1), err


def test_full_disk_mid_run_loses_nothing_and_the_next_run_converges(tmpfs, prefect_api,
                                                                   tmp_path, settings):
    from kbsync.store.edge import diskspace
    from kbsync.ingest.discover import parse_root
    from kbsync.ingest.runner import run_plain
    from kbsync.runtime import Runtime

    mount = tmpfs(192)
    home = mount / "home"
    seed, share = tmp_path / "seed", tmp_path / "share"
    write_tree(seed, {"start.md": "# Start\n\nThe first document.\n"})
    _share_gen().generate(share, FILES, seed=7)  # ~1,000 chunks, ~7 MiB in the store
    env = hash_env(prefect_api, home, KBSYNC_MIN_FREE_MB="0", KBSYNC_FILES_PER_BATCH="8")
    seeding = Runtime.open(settings.model_copy(update={"home": home}))
    try:  # the store's collections exist (fast, in-process): what is left is the share
        run_plain([parse_root(str(seed))], runtime=seeding)
    finally:
        seeding.close()

    # A store created but never reopened has unallocated pages that opening maps (on tmpfs
    # they are allocated on read): with the disk full, `stats` used to die from SIGBUS.
    holes = diskspace.mapped_holes(home / "qdrant")
    assert holes > 0
    full = mount / "full.bin"
    _fill(full)
    _disk_full_line(*kbsync(env, "stats", "--json")[::2])
    full.unlink()

    # Room for opening plus a few batches (one needs ~1.4 MiB), not for the share: the run
    # stops between batches.
    _ballast(mount / "ballast.bin", diskspace.free_bytes(mount) - holes - 5 * MIB)
    code, _, err = kbsync(env, "ingest", str(share), "--json")
    _disk_full_line(code, err)

    _fill(full)  # reads on a full disk: a result or one DiskFull line, never a crash
    for args in (("stats", "--json"), ("search", "retry timeout", "--json")):
        code, _, err = kbsync(env, *args)
        if code:
            _disk_full_line(code, err)
    full.unlink()
    (mount / "ballast.bin").unlink()

    partial, _ = _index(home)  # consistent: every record has exactly its points
    done = [d for d in partial if d.startswith("share/")]
    assert 0 < len(done) < FILES

    code, _, err = kbsync(env, "ingest", str(share), "--json")
    assert code == 0, err
    reference = Runtime.open(settings)  # a clean run of the same roots, on an ordinary disk
    try:
        run_plain([parse_root(str(seed)), parse_root(str(share))], runtime=reference)
    finally:
        reference.close()
    assert _index(home) == _index(settings.home)


def test_embedding_cache_on_a_full_disk_only_warns(tmpfs, caplog):
    from kbsync.embed.cache import EmbeddingCache

    mount = tmpfs(2)
    cache = EmbeddingCache(mount / "cache")
    cache.set_many({"k0": [0.5] * 384})
    _fill(mount / "full.bin")
    vectors = {f"k{i}": [float(i)] * 384 for i in range(1, 3000)}
    with caplog.at_level(logging.WARNING, logger="kbsync.embed.cache"):
        stored = cache.set_many(vectors)
        found = cache.get_many(["k0", "k2999"])
    assert stored == 0
    assert found[1] is None and (found[0] is None or found[0] == [0.5] * 384)
    assert any("going on without it" in r.getMessage() for r in caplog.records)
    cache.close()
