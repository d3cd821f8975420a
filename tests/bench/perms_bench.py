"""What permission-aware search costs: the three bounds of issue 39, in one run (a script, not a test).

    python tests/bench/perms_bench.py [--chunks 100000] [--users 10] [--groups 20]
        [--folders 2000] [--queries 60] [--update-files 10000] [--walk-files 100000]
        [--noop-files 30000] [--repeats 3] [--only search,update,capture]

Needs root: it makes ``--users`` users and ``--groups`` groups with ``groupadd`` and
``useradd`` (each user in 0-2 groups besides its primary one, as tests/perms/perm_users.py
does) and removes them at the end, with every tree it wrote under /tmp. The 1-minute load
average is printed beside each figure: only ratios within one run travel.

1. **search** (bound: p50 with the filter <= 1.2x without). A tree of ``--folders``
   folders (10 top, 10 below each, leaves below those) holding ``chunks / 10`` empty
   files, every folder and file given a random owner (the users, root, a uid without a
   passwd entry), group (the groups, a gid without an entry) and mode (mostly the
   usual 755/750/770 and 644/640/660, some 700/711/600/400), files of a folder mostly
   sharing its "house" owner and mode, and a share of folders and files a POSIX access
   ACL with named users and groups and a mask (written as the ``system.posix_acl_access``
   xattr). Discovery (:func:`kbsync.ingest.discover.discover`, the real capture) gives
   each file its profile. A fresh edge store then gets every profile
   (:func:`kbsync.catalog.access.record_profiles`), the root's binding and capture mark,
   and ``--chunks`` chunk points in one namespace, 10 per file, each carrying its file's
   ``access`` (dense vector, BM25 sparse vector and payload as in search_bench.py). For
   each query (the same queries in both modes, after 5 warm-up ones), in turn:
   :func:`kbsync.query.search.search` as root (nothing filtered: the "without"), as each
   user (``as_user``: :func:`~kbsync.catalog.access.access_condition` per search, which
   reads the profiles again only when their number changed,
   :func:`~kbsync.catalog.access.readable_ids`), as each user with the condition built once
   beforehand (the filter's own cost), and the condition alone (the profile count, the
   meta reads around it, the reader's groups from NSS). Every 5th query (dense only, ~0.2
   s a call): the search as each user with the remembered profiles dropped first (every
   search before the cache), and ``load_profiles`` + ``allowed_ids`` alone (what that
   costs). Every hit a user gets is checked against the user's allowed profiles.
2. **update** (bound: a permission-only update of 10,000 documents <= 10 s). A share of
   ``--update-files`` generated files (share_gen.py, office=False) is ingested with
   :func:`kbsync.ingest.runner.run_plain` (hash embedder, in-process conversion), then in
   the same process: a no-op run; ``chmod 750`` of the root (every document's profile
   changes through its folder chain); ``chmod 640`` of every file (every file's own grant
   changes, seen by its ctime). Each run's wall time, ``stage_s`` plan and finish,
   ``permissions_updated``; 0 conversions and embeddings asserted.
3. **capture** (bound: capture adds <= 10% to a no-op run of 100k files). A share of
   ``--walk-files`` tiny files in ~2,000 folders (5% of the files and 10% of the folders
   with an access ACL) is walked by ``discover`` ``--repeats`` times with capture and as
   many without (``kbsync.ingest.walk``'s ``_profile``, ``_folder_chain`` and
   ``_root_chain`` stubbed out: no getxattr, no folder stat, no grant key), alternating,
   after one warm-up walk (the page cache and dentries warm). The denominator is the no-op
   run of the same kind of share of ``--noop-files`` files (run_plain, after its first
   ingest), median of two, with the walks repeated at that size for the ratio. The
   default is 30,000: the first ingest a 100k no-op needs takes ~12 min on the shared
   2-core machine (``--noop-files 100000`` for the issue's own figure).

The whole run took 20 min there at load 10-18 (search 7, update 4, capture 9).
"""

from __future__ import annotations

import argparse
import grp
import os
import pwd
import random
import shutil
import signal
import statistics
import struct
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "perms"), str(HERE.parents[1])]
os.environ["KBSYNC_EMBED_PROVIDER"] = "hash"
os.environ["KBSYNC_CONVERT_ISOLATION"] = "false"

SEARCH_BOUND = 1.2
UPDATE_BOUND_S = 10.0
CAPTURE_BOUND = 0.10
CHUNKS_PER_DOC = 10
WARMUP = 5
NAMESPACE = "default"
COLLECTION = "bench"
ROOT_NAME = "share"
NO_PASSWD_UID, NO_GROUP_GID = 61_234, 61_235  # ids with no passwd / group entry
DIR_MODES = (0o755,) * 6 + (0o750,) * 4 + (0o770,) * 2 + (0o775, 0o711, 0o751, 0o700, 0o710)
FILE_MODES = (0o644,) * 5 + (0o640,) * 4 + (0o660,) * 2 + (0o664, 0o600, 0o400, 0o440, 0o604)
_ACL_ENTRY = struct.Struct("<HHI")
_UNDEFINED = 0xFFFFFFFF


def load1() -> float:
    return os.getloadavg()[0]


def _pct(times: list[float]) -> tuple[float, float]:
    times = sorted(times)
    return statistics.median(times), times[max(0, int(len(times) * 0.95) - 1)]


# -- users, groups, trees ---------------------------------------------------------------------
class Ids:
    """The uids and gids of the bench's people, plus ids without NSS entries."""

    def __init__(self, users: list[str], groups: list[str]) -> None:
        self.users = users
        self.uids = [pwd.getpwnam(u).pw_uid for u in users]
        self.gids = [grp.getgrnam(g).gr_gid for g in groups]
        self.owners = [*self.uids, 0, NO_PASSWD_UID]
        self.groups = [*self.gids, NO_GROUP_GID]


def set_acl(path: Path, mode: int, users: list[tuple[int, int]], groups: list[tuple[int, int]],
            mask: int) -> None:
    """Give ``path`` an access ACL (the xattr the kernel reads; it sets the mode's group bits
    to the mask): owner, owning group and other from ``mode``, named ``users`` and ``groups``
    as ``(id, perm)``."""
    entries = [(0x01, (mode >> 6) & 7, _UNDEFINED)]
    entries += [(0x02, perm, uid) for uid, perm in sorted(dict(users).items())]
    entries += [(0x04, (mode >> 3) & 7, _UNDEFINED)]
    entries += [(0x08, perm, gid) for gid, perm in sorted(dict(groups).items())]
    entries += [(0x10, mask, _UNDEFINED), (0x20, mode & 7, _UNDEFINED)]
    raw = struct.pack("<I", 2) + b"".join(_ACL_ENTRY.pack(*e) for e in entries)
    os.setxattr(path, "system.posix_acl_access", raw)


def _dress(path: Path, rng: random.Random, ids: Ids, owner: int, group: int, mode: int,
           acl_share: float) -> None:
    os.chown(path, owner, group)
    os.chmod(path, mode)
    if rng.random() < acl_share:
        users = [(rng.choice(ids.uids), rng.choice((4, 5, 1, 0, 7))) for _ in range(rng.randint(1, 2))]
        groups = [(rng.choice(ids.gids), rng.choice((4, 5, 1, 0, 7))) for _ in range(rng.randint(0, 2))]
        set_acl(path, mode, users, groups, rng.choice((7, 5, 4, 5, 7)))


def permission_tree(root: Path, ids: Ids, *, folders: int, files: int, seed: int) -> int:
    """``folders`` folders (10 x 10 x leaves) under ``root`` with ``files`` empty files spread
    over the leaves, owners, groups, modes and ACLs drawn as the module doc says. Returns
    the number of folders made."""
    rng = random.Random(seed)
    leaves_per_mid = max(1, round((folders - 110) / 100))
    leaves = []
    made = 0
    for top in range(10):
        for mid in range(10):
            for leaf in range(leaves_per_mid):
                folder = root / f"t{top}" / f"m{mid}" / f"l{leaf}"
                folder.mkdir(parents=True, exist_ok=True)
                leaves.append(folder)
    for i in range(files):
        (leaves[i % len(leaves)] / f"f{i}.md").write_bytes(b"")
    for folder in sorted({p for leaf in leaves for p in (leaf, leaf.parent, leaf.parent.parent)}):
        made += 1
        _dress(folder, rng, ids, rng.choice(ids.owners), rng.choice(ids.groups),
               rng.choice(DIR_MODES), acl_share=0.15)
    for leaf in leaves:
        house = (rng.choice(ids.owners), rng.choice(ids.groups), rng.choice(FILE_MODES))
        for path in sorted(leaf.iterdir()):
            if rng.random() < 0.8:
                _dress(path, rng, ids, *house, acl_share=0.05)
            else:
                _dress(path, rng, ids, rng.choice(ids.owners), rng.choice(ids.groups),
                       rng.choice(FILE_MODES), acl_share=0.10)
    return made


def tiny_share(root: Path, files: int, *, seed: int, acl: bool = True) -> Path:
    """``files`` one-paragraph Markdown files in ~2,000 folders (20 x 100 leaves), a share of
    them with an access ACL (named entries for uids and gids that need no NSS entry)."""
    rng = random.Random(seed)
    per_leaf = max(1, files // 2000)
    for i in range(files):
        leaf = i // per_leaf
        folder = root / f"team{leaf % 20}" / f"area{leaf}"
        if i % per_leaf == 0:
            folder.mkdir(parents=True, exist_ok=True)
            if acl and rng.random() < 0.10:
                set_acl(folder, 0o755, [(1000 + leaf % 7, 5)], [(2000 + leaf % 5, 5)], 5)
        path = folder / f"note{i}.md"
        path.write_text(f"# Note {i}\n\nvolcano field notes number {i} about basalt and "
                        f"obsidian, kept in area {leaf}.\n", encoding="utf-8")
        if acl and rng.random() < 0.05:
            set_acl(path, 0o644, [(1000 + i % 7, 4)], [(2000 + i % 5, 4)], 4)
    return root


@contextmanager
def bench_folder(name: str):
    """A fresh folder under /tmp every user may traverse, removed on exit."""
    base = Path(f"/tmp/kbsync-permbench-{name}-{os.getpid()}")
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(mode=0o755)
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


# -- 1. search with and without the filter ----------------------------------------------------
def bench_search(args, people) -> dict:
    from kbsync.catalog import access
    from kbsync.catalog.access import (access_condition, allowed_ids, load_profiles,
                                       mark_captured, record_profiles)
    from kbsync.catalog.identity import ROOT_BINDING
    from kbsync.catalog.schema import CHUNK_BOOL_INDEXES, CHUNK_INDEXES, CHUNK_INTEGER_INDEXES
    from kbsync.catalog.state import StateStore
    from kbsync.ingest.discover import discover
    from kbsync.models import RootSpec
    from kbsync.perms.reader import Reader
    from kbsync.query import search as search_mod
    from kbsync.query.request import SearchRequest
    from kbsync.settings import Settings
    from kbsync.store.edge.store import EdgeStore
    from search_bench import DIM, FixedDimService, _vocabulary

    ids = Ids(people.users, people.groups)
    out: dict = {}
    with bench_folder("search") as base:
        tree = base / ROOT_NAME
        tree.mkdir()
        docs = args.chunks // CHUNKS_PER_DOC
        t0 = time.perf_counter()
        out["folders"] = permission_tree(tree, ids, folders=args.folders, files=docs, seed=39)
        found = discover(RootSpec(name=ROOT_NAME, path=tree))
        assert len(found.files) == docs and not found.unreadable_access, (
            len(found.files), found.unreadable_access[:3])
        out["tree_s"] = time.perf_counter() - t0
        profiles = {f.access for f in found.files}
        out["profiles"] = len(profiles)
        out["docs"] = docs
        print(f"search: tree of {out['folders']:,} folders, {docs:,} files, "
              f"{len(profiles):,} profiles in {out['tree_s']:.1f} s (load {load1():.2f})",
              file=sys.stderr, flush=True)
        workdir = Path(tempfile.mkdtemp(prefix="kbsync-permbench-store-"))
        try:
            with EdgeStore(workdir) as store:
                store.ensure_collection(COLLECTION, dimension=DIM, keyword_indexes=CHUNK_INDEXES,
                                        sparse=True, bool_indexes=CHUNK_BOOL_INDEXES,
                                        integer_indexes=CHUNK_INTEGER_INDEXES)
                states = StateStore(store, Settings.state_collection_of(COLLECTION))
                record_profiles(states, found.files)
                states.write_meta(ROOT_BINDING, (NAMESPACE, ROOT_NAME), {
                    "bound_namespace": NAMESPACE, "root": ROOT_NAME, "path": str(tree),
                    "bound_at": "2026-01-01T00:00:00+00:00", "run_id": "bench"})
                mark_captured(states, NAMESPACE, ROOT_NAME)
                t0 = time.perf_counter()
                rnd = random.Random(42)
                words, weights = _vocabulary(rnd)
                _load_chunks(store, found.files, rnd, words, weights)
                out["load_s"] = time.perf_counter() - t0
                print(f"search: {args.chunks:,} chunks loaded in {out['load_s']:.0f} s "
                      f"(load {load1():.2f})", file=sys.stderr, flush=True)
                queries = [" ".join(rnd.choices(words[:2000], k=rnd.randint(2, 5)))
                           for _ in range(args.queries + WARMUP)]
                # Who may read what, decided once (for the checks and the prebuilt rows).
                every = load_profiles(states)
                me = Reader.of_process()
                readable = {}
                for user in people.users:
                    allowed = set(allowed_ids(every, [me, Reader.of_name(user)]))
                    readable[user] = allowed
                doc_access = [f.access for f in found.files]
                out["visible"] = {u: sum(a in readable[u] for a in doc_access) / docs
                                  for u in people.users}
                out["allowed_profiles"] = {u: len(readable[u]) for u in people.users}
                out["rows"] = _measure(store, FixedDimService(), queries, people.users,
                                       readable, states, access_condition, search_mod,
                                       SearchRequest, access,
                                       {f.doc_id: f.access for f in found.files})
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    return out


def _load_chunks(store, files, rnd, words, weights) -> None:
    import numpy as np

    from kbsync.catalog.schema import PAYLOAD_VERSION, folders_of
    from kbsync.store import Point
    from kbsync.text.sparse import encode_document
    from search_bench import DIM, _text

    rng = np.random.default_rng(42)
    batch = 256
    total = len(files) * CHUNKS_PER_DOC
    for start in range(0, total, batch):
        stop = min(start + batch, total)
        vectors = rng.standard_normal((stop - start, DIM), dtype=np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        points = []
        for offset, i in enumerate(range(start, stop)):
            source = files[i // CHUNKS_PER_DOC]
            text = _text(i, rnd, words, weights)
            payload = {"namespace": NAMESPACE, "doc_id": source.doc_id,
                       "chunk_index": i % CHUNKS_PER_DOC, "text": text,
                       "heading_path": "Chapter > Section", "page_start": None, "page_end": None,
                       "path": str(source.path), "embedding_failed": False, "root": ROOT_NAME,
                       "rel_path": source.rel_path, "folders": folders_of(source.rel_path),
                       "source_type": "markdown", "modified": 1_700_000_000,
                       "payload_version": PAYLOAD_VERSION, "access": source.access}
            points.append(Point(str(uuid.UUID(int=i + 1)), payload, vectors[offset].tolist(),
                                encode_document(text)))
        store.upsert(COLLECTION, points)


def _measure(store, service, queries, users, readable, states, access_condition, search_mod,
             SearchRequest, access, doc_access: dict[str, str]) -> dict:
    """p50/p95 ms per (measure, mode), each query run as root, as every user (condition
    built per search and prebuilt) and the condition alone, in turn (interleaved, so the
    machine's noise falls on every row alike)."""
    times: dict[tuple[str, str], list[float]] = {}
    per_user: dict[tuple[str, str, str], list[float]] = {}
    loads: dict[tuple[str, str], list[float]] = {}
    built = {u: access_condition(states, NAMESPACE, u) for u in users}
    real_condition = search_mod.access_condition

    def note(key, ms, n, user=None):
        if n >= WARMUP:
            times.setdefault(key, []).append(ms)
            if user is not None:
                per_user.setdefault((*key, user), []).append(ms)
            if n % 10 == 0:
                loads.setdefault(key, []).append(load1())

    for n, query in enumerate(queries):
        for mode in ("dense", "hybrid"):
            request = SearchRequest.build(query, namespace=NAMESPACE, k=5, mode=mode)
            t0 = time.perf_counter()
            result = search_mod.search(request, store=store, service=service,
                                       collection=COLLECTION)
            note(("without filter (root)", mode), (time.perf_counter() - t0) * 1000, n)
            assert len(result.results) == 5
            for user in users:
                request = SearchRequest.build(query, namespace=NAMESPACE, k=5, mode=mode,
                                              as_user=user)
                t0 = time.perf_counter()
                result = search_mod.search(request, store=store, service=service,
                                           collection=COLLECTION)
                note(("with filter, condition per search", mode),
                     (time.perf_counter() - t0) * 1000, n, user)
                _check(result, readable[user], doc_access)
                search_mod.access_condition = lambda _s, _ns, as_user=None: built[as_user]
                try:
                    t0 = time.perf_counter()
                    result = search_mod.search(request, store=store, service=service,
                                               collection=COLLECTION)
                    note(("with filter, condition prebuilt", mode),
                         (time.perf_counter() - t0) * 1000, n, user)
                finally:
                    search_mod.access_condition = real_condition
                _check(result, readable[user], doc_access)
                if mode == "dense":
                    t0 = time.perf_counter()
                    access_condition(states, NAMESPACE, user)
                    note(("condition alone", "-"), (time.perf_counter() - t0) * 1000, n, user)
                if mode == "dense" and n % 5 == 0:  # every 5th query: ~0.2 s a call
                    access._known.clear()  # as before the cache: every profile read again
                    t0 = time.perf_counter()
                    search_mod.search(request, store=store, service=service,
                                      collection=COLLECTION)
                    note(("with filter, condition per search, uncached", mode),
                         (time.perf_counter() - t0) * 1000, n, user)
                    t0 = time.perf_counter()
                    access.allowed_ids(access.load_profiles(states),
                                       [access.Reader.of_process(), access.Reader.of_name(user)])
                    note(("load_profiles + allowed_ids", "-"), (time.perf_counter() - t0) * 1000,
                         n, user)
    return {"times": {k: _pct(v) for k, v in times.items()},
            "per_user": {k: _pct(v) for k, v in per_user.items()},
            "loads": {k: (min(v), max(v)) for k, v in loads.items()}}


def _check(result, allowed: set[str], doc_access: dict[str, str]) -> None:
    """Every hit is of a document the user may read."""
    assert all(doc_access[hit.doc_id] in allowed for hit in result.results), \
        "a hit the reader may not read"


# -- 2. a permission-only update --------------------------------------------------------------
def bench_update(args) -> dict:
    from share_gen import generate

    out: dict = {}
    with bench_folder("update") as base:
        share = base / ROOT_NAME
        t0 = time.perf_counter()
        generate(share, args.update_files, office=False)
        out["gen_s"] = time.perf_counter() - t0
        print(f"update: {args.update_files:,} files generated in {out['gen_s']:.0f} s "
              f"(load {load1():.2f})", file=sys.stderr, flush=True)
        with _runtime(base / "home") as ingest:
            out["first"] = ingest(share)
            assert out["first"]["added"] == args.update_files and not out["first"]["failed"]
            out["noop"] = ingest(share)
            assert out["noop"]["permissions_updated"] == 0
            share.chmod(0o750)  # other loses x on the root: every document's chain changes
            out["chmod root 750"] = ingest(share)
            files = [p for p in share.rglob("*") if p.is_file()]
            for path in files:
                path.chmod(0o640)  # was 644: other loses r, each file's own grant changes
            out["chmod 640 every file"] = ingest(share)
            out["noop after"] = ingest(share)
        for name in ("chmod root 750", "chmod 640 every file"):
            run = out[name]
            assert run["permissions_updated"] == args.update_files, (name, run)
            assert run["embeddings_computed"] == 0 and run["chunks_raw"] == 0, (name, run)
    return out


@contextmanager
def _runtime(home: Path):
    """A function that runs run_plain over a share in one Runtime, returning its summary
    (to_dict) with the wall time and the load average."""
    os.environ["KBSYNC_HOME"] = str(home)
    from kbsync.ingest.runner import run_plain
    from kbsync.models import RootSpec
    from kbsync.runtime import Runtime
    from kbsync.settings import Settings

    runtime = Runtime.open(Settings())

    def ingest(share: Path) -> dict:
        t0 = time.perf_counter()
        summary = run_plain([RootSpec(name=ROOT_NAME, path=share)], runtime=runtime)
        wall = time.perf_counter() - t0
        result = summary.to_dict()
        result["wall_s"] = wall
        result["load"] = load1()
        print(f"  run: {wall:.2f} s, added {result['added']}, unchanged {result['unchanged']}, "
              f"permissions_updated {result['permissions_updated']}, stage_s "
              f"{result['stage_s']} (load {result['load']:.2f})", file=sys.stderr, flush=True)
        return result

    try:
        yield ingest
    finally:
        runtime.close()
        shutil.rmtree(home, ignore_errors=True)


# -- 3. what capture adds to a walk and to a no-op run ----------------------------------------
@contextmanager
def capture_off():
    """``kbsync.ingest.walk`` with no capture: no getxattr, no folder stat, no grant key."""
    from kbsync.ingest import walk
    from kbsync.perms.rule import Profile

    fixed = Profile(id="bench", grants=())
    saved = walk._profile, walk._folder_chain, walk._root_chain
    walk._profile = lambda result, path, info, chain, folder, doc_id: fixed
    walk._folder_chain = lambda folder, above: above
    walk._root_chain = lambda root: ()
    try:
        yield
    finally:
        walk._profile, walk._folder_chain, walk._root_chain = saved


def bench_capture(args) -> dict:
    from kbsync.ingest.discover import discover
    from kbsync.models import RootSpec

    out: dict = {"walk": {}, "walk_load": {}}
    with bench_folder("capture") as base:
        share = base / ROOT_NAME
        t0 = time.perf_counter()
        tiny_share(share, args.walk_files, seed=3)
        print(f"capture: {args.walk_files:,} files written in {time.perf_counter() - t0:.0f} s "
              f"(load {load1():.2f})", file=sys.stderr, flush=True)
        root = RootSpec(name=ROOT_NAME, path=share)
        assert len(discover(root).files) == args.walk_files  # warm-up walk
        for _ in range(args.repeats):
            for name in ("with capture", "without capture"):
                t0 = time.perf_counter()
                if name == "with capture":
                    found = discover(root)
                else:
                    with capture_off():
                        found = discover(root)
                out["walk"].setdefault(name, []).append(time.perf_counter() - t0)
                out["walk_load"].setdefault(name, []).append(load1())
                assert len(found.files) == args.walk_files
        print(f"capture: walks {out['walk']} (load {load1():.2f})", file=sys.stderr, flush=True)
        if args.noop_files == args.walk_files:
            noop_share = share
        else:
            noop_share = tiny_share(base / "noop" / ROOT_NAME, args.noop_files, seed=3)
        with _runtime(base / "home") as ingest:
            out["first"] = ingest(noop_share)
            assert out["first"]["added"] == args.noop_files, out["first"]
            out["noops"] = [ingest(noop_share) for _ in range(2)]
        if noop_share is not share:  # the walk at the no-op's size, for the same ratio
            for _ in range(args.repeats):
                for name in ("with capture", "without capture"):
                    t0 = time.perf_counter()
                    if name == "with capture":
                        discover(RootSpec(name=ROOT_NAME, path=noop_share))
                    else:
                        with capture_off():
                            discover(RootSpec(name=ROOT_NAME, path=noop_share))
                    out.setdefault("noop_walk", {}).setdefault(name, []).append(
                        time.perf_counter() - t0)
    return out


# -- the report -------------------------------------------------------------------------------
def report_search(out: dict, users: list[str]) -> bool:
    rows, loads = out["rows"]["times"], out["rows"]["loads"]
    print(f"\n### 1. search: {out['docs'] * CHUNKS_PER_DOC:,} chunks ({out['docs']:,} files, "
          f"{out['folders']:,} folders), {len(users)} users, {out['profiles']:,} distinct "
          f"profiles; tree {out['tree_s']:.0f} s, load {out['load_s']:.0f} s\n")
    print("| measure | mode | p50 ms | p95 ms | x without p50 | load (1 min) |")
    print("|---|---|---:|---:|---:|---|")
    ok = True
    for mode in ("dense", "hybrid"):
        base = rows[("without filter (root)", mode)][0]
        for measure in ("without filter (root)", "with filter, condition per search",
                        "with filter, condition prebuilt",
                        "with filter, condition per search, uncached"):
            if (measure, mode) not in rows:
                continue
            p50, p95 = rows[(measure, mode)]
            lo, hi = loads[(measure, mode)]
            print(f"| {measure} | {mode} | {p50:.2f} | {p95:.2f} | {p50 / base:.2f} | "
                  f"{lo:.2f}-{hi:.2f} |")
        ok &= rows[("with filter, condition per search", mode)][0] <= SEARCH_BOUND * base
    for measure in ("condition alone", "load_profiles + allowed_ids"):
        p50, p95 = rows[(measure, "-")]
        lo, hi = loads[(measure, "-")]
        print(f"| {measure} | - | {p50:.2f} | {p95:.2f} | - | {lo:.2f}-{hi:.2f} |")
    print("\nPer user (p50 ms, condition per search; visible = share of the chunks it may read):\n")
    print("| user | visible | allowed profiles | dense p50 | hybrid p50 | condition p50 |")
    print("|---|---:|---:|---:|---:|---:|")
    per = out["rows"]["per_user"]
    for user in users:
        print(f"| {user} | {out['visible'][user]:.1%} | {out['allowed_profiles'][user]:,} | "
              f"{per[('with filter, condition per search', 'dense', user)][0]:.2f} | "
              f"{per[('with filter, condition per search', 'hybrid', user)][0]:.2f} | "
              f"{per[('condition alone', '-', user)][0]:.2f} |")
    return ok


def report_update(out: dict, files: int) -> bool:
    print(f"\n### 2. permission-only update: {files:,} generated files "
          f"({out['first']['chunks_kept']:,} chunks), run_plain, hash embedder\n")
    print("| run | wall s | plan s | finish s | permissions_updated | unchanged | embeddings "
          "| load (1 min) |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for name in ("first", "noop", "chmod root 750", "chmod 640 every file", "noop after"):
        run = out[name]
        stage = run["stage_s"]
        print(f"| {name} | {run['wall_s']:.2f} | {stage.get('plan', 0):.2f} | "
              f"{stage.get('finish', 0):.2f} | {run['permissions_updated']:,} | "
              f"{run['unchanged']:,} | {run['embeddings_computed']:,} | {run['load']:.2f} |")
    return all(out[n]["wall_s"] <= UPDATE_BOUND_S for n in ("chmod root 750",
                                                             "chmod 640 every file"))


def report_capture(out: dict, args) -> bool:
    walk = {k: statistics.median(v) for k, v in out["walk"].items()}
    print(f"\n### 3. capture: discover over {args.walk_files:,} files, {args.repeats} walks "
          f"each, alternating, warm\n")
    print("| walk | median s | all s | load (1 min) |")
    print("|---|---:|---|---|")
    for name, times in out["walk"].items():
        ld = out["walk_load"][name]
        print(f"| {name} | {walk[name]:.2f} | {', '.join(f'{t:.2f}' for t in times)} | "
              f"{min(ld):.2f}-{max(ld):.2f} |")
    added = walk["with capture"] - walk["without capture"]
    noops = out["noops"]
    noop = statistics.median(r["wall_s"] for r in noops)
    if "noop_walk" in out:
        nw = {k: statistics.median(v) for k, v in out["noop_walk"].items()}
        added_noop = nw["with capture"] - nw["without capture"]
        print(f"| at {args.noop_files:,} files: with / without | {nw['with capture']:.2f} / "
              f"{nw['without capture']:.2f} | | |")
    else:
        added_noop = added
    print(f"\nno-op run_plain of {args.noop_files:,} files (after a first ingest of "
          f"{out['first']['wall_s']:.0f} s, load {out['first']['load']:.2f}): "
          + ", ".join(f"{r['wall_s']:.2f} s (plan {r['stage_s'].get('plan', 0):.2f}, load "
                      f"{r['load']:.2f})" for r in noops))
    share = added_noop / noop
    print(f"capture adds {added:.2f} s to the {args.walk_files:,}-file walk "
          f"({added / walk['without capture']:.0%} of the walk without it); at "
          f"{args.noop_files:,} files {added_noop:.2f} s = {share:.1%} of the no-op run "
          f"({noop:.2f} s)")
    return share <= CAPTURE_BOUND


def main(argv: list[str] | None = None) -> int:
    # A kill ends the run through its finally blocks: the users, groups and trees go.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--folders", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--update-files", type=int, default=10_000)
    parser.add_argument("--walk-files", type=int, default=100_000)
    parser.add_argument("--noop-files", type=int, default=30_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default="search,update,capture")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("perms_bench.py needs root (useradd, groupadd, chown)")
    from perm_users import local_people

    only = set(args.only.split(","))
    started = time.perf_counter()
    print(f"perms_bench.py {' '.join(argv if argv is not None else sys.argv[1:])} "
          f"(load at start {load1():.2f}; {time.strftime('%Y-%m-%d %H:%M')})")
    verdicts = []
    if "search" in only:
        with local_people(args.users, args.groups, seed=39) as people:
            out = bench_search(args, people)
            ok = report_search(out, people.users)
        verdicts.append(f"search p50 with the filter <= {SEARCH_BOUND}x without: "
                        f"{'met' if ok else 'MISSED'}")
    if "update" in only:
        out = bench_update(args)
        ok = report_update(out, args.update_files)
        verdicts.append(f"permission-only update of {args.update_files:,} documents <= "
                        f"{UPDATE_BOUND_S:.0f} s: {'met' if ok else 'MISSED'}")
    if "capture" in only:
        out = bench_capture(args)
        ok = report_capture(out, args)
        verdicts.append(f"capture <= {CAPTURE_BOUND:.0%} of a no-op run of "
                        f"{args.noop_files:,} files: {'met' if ok else 'MISSED'}")
    print()
    for line in verdicts:
        print(f"- {line}")
    print(f"\nwall {time.perf_counter() - started:.0f} s, load at end {load1():.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
