"""Every reader sees exactly what the share lets them read: search, ask, stats through the
Python API against the kernel (issue 39). The same story through the real CLI is
tests/perms/test_perms_cli.py (slow tier)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fake_openai import FakeOpenAIServer
from kbsync import api
from kbsync.errors import PermissionsNotCaptured, UsageError
from kbsync.ingest.runner import run_plain
from kbsync.models import RootSpec
from kbsync.runtime import Runtime
from perm_users import kernel_readable, local_people, open_folder, random_share, require_tools, run

TOPS = 3


def _sync(settings, root: Path, **options):
    rt = Runtime.open(settings)
    try:
        return run_plain([RootSpec(name="share", path=root)], runtime=rt, **options)
    finally:
        rt.close()


def _visible(settings, user: str | None, **filters) -> set[str]:
    """Every doc_id a search as ``user`` can return: one dense search per top folder, each
    of them smaller than k (40 files a folder here)."""
    found: set[str] = set()
    for top in range(TOPS):
        result = api.search("volcano field notes", k=100, mode="dense", settings=settings,
                            as_user=user, path_prefix=f"t{top}", **filters)
        found |= {hit.doc_id for hit in result.results}
    return found


def _doc_ids(root: Path, paths: set[Path]) -> set[str]:
    return {f"share/{p.relative_to(root).as_posix()}" for p in paths}


@pytest.fixture
def world(settings):
    require_tools()
    with local_people(5, 3, seed=7) as people, open_folder("kbsync-perms-api") as base:
        root = base / "share"
        files = random_share(root, people, seed=7, per_folder=5)
        first = _sync(settings, root)
        assert first.added == len(files) and first.failed == 0
        yield settings, root, files, people, first


def test_search_stats_and_permission_only_changes_follow_the_kernel(world) -> None:
    settings, root, files, people, first = world
    for user in people.users:
        expected = _doc_ids(root, kernel_readable(user, files))
        assert _visible(settings, user) == expected, user
        stats = api.stats("default", settings=settings, as_user=user)
        assert stats.namespaces["default"]["documents"] == len(expected)
    assert _visible(settings, None) == _doc_ids(root, set(files))  # root reads everything
    run("chmod", "0644", str(files[0]))
    run("chown", people.users[1], str(files[1]))
    run("setfacl", "-m", f"u:{people.users[2]}:r--,m::r--", str(files[2]))
    run("setfacl", "-b", str(files[3]))
    run("chmod", "0700", str(files[40].parent))
    second = _sync(settings, root)
    assert (second.added, second.updated, second.failed) == (0, 0, 0)
    assert second.embeddings_computed == 0 and second.chunks_raw == 0  # nothing converted
    assert second.permissions_updated > 0
    for user in people.users:
        assert _visible(settings, user) == _doc_ids(root, kernel_readable(user, files)), user
    third = _sync(settings, root)
    assert third.permissions_updated == 0 and third.unchanged == len(files)


def test_a_folders_chmod_rewrites_profile_records_not_points(world, monkeypatch) -> None:
    """A folder's change of permissions keeps its documents' profile ids: no point is written
    (the store's payload update is never called), every document under it is counted, and
    each reader's view follows the kernel at once."""
    settings, root, files, people, _first = world
    from kbsync.store.edge.store import EdgeStore

    def no_point_update(*_a, **_k):
        raise AssertionError("a folder's chmod wrote points")

    monkeypatch.setattr(EdgeStore, "set_payload", no_point_update)
    folder = files[7].parent
    under = [f for f in files if folder in f.parents]
    run("chmod", "0700", str(folder))
    second = _sync(settings, root)
    assert second.permissions_updated == len(under) and second.embeddings_computed == 0
    for user in people.users:
        assert _visible(settings, user) == _doc_ids(root, kernel_readable(user, files)), user
    run("chmod", "0755", str(folder))
    assert _sync(settings, root).permissions_updated == len(under)
    for user in people.users:
        assert _visible(settings, user) == _doc_ids(root, kernel_readable(user, files)), user


def test_a_group_change_applies_at_once_with_no_run(world) -> None:
    settings, root, files, people, _first = world
    import grp
    import pwd

    for user in people.users:
        primary = pwd.getpwnam(user).pw_gid
        extra = [g.gr_name for g in grp.getgrall() if user in g.gr_mem and g.gr_gid != primary]
        if extra:
            run("gpasswd", "-d", user, extra[0])
            expected = _doc_ids(root, kernel_readable(user, files))
            assert _visible(settings, user) == expected
            return
    pytest.skip("no user of this draw has a supplementary group")


def test_filters_never_widen_a_readers_view(world) -> None:
    settings, root, files, people, _first = world
    user = people.users[0]
    mine = _doc_ids(root, kernel_readable(user, files))
    for hostile in ({"root": "share"}, {"types": "markdown"}, {"min_score": -1.0}):
        assert _visible(settings, user, **hostile) <= mine
    for prefix in ("t0/../t1", "/", "..", "t0/*", "t0' OR '1'='1"):
        try:
            found = api.search("volcano", k=100, mode="dense", settings=settings, as_user=user,
                               path_prefix=prefix)
        except UsageError:
            continue  # refused outright is fine too
        assert {hit.doc_id for hit in found.results} <= mine
    with pytest.raises(UsageError, match="no such user"):
        api.search("volcano", settings=settings, as_user="no-such-user-kb39")


def test_ask_never_hands_the_model_a_chunk_the_reader_cannot_read(world, monkeypatch) -> None:
    settings, root, files, people, _first = world
    user = max(people.users, key=lambda u: len(kernel_readable(u, files)))
    mine = _doc_ids(root, kernel_readable(user, files))
    hidden = _doc_ids(root, set(files)) - mine
    assert hidden and mine
    with FakeOpenAIServer(chat_reply="Notes [1].") as server:
        monkeypatch.setenv("KBSYNC_LLM_BASE_URL", server.url)
        monkeypatch.setenv("KBSYNC_LLM_MODEL", "fake-chat")
        from kbsync.settings import Settings

        answer = api.ask("volcano field notes number", k=10, min_score=0.0, as_user=user,
                         settings=Settings())
        prompts = " ".join(str(r.body) for r in server.chat_requests())
    assert {c.doc_id for c in answer.citations} <= mine
    assert answer.context_used > 0
    assert all(doc_id not in prompts for doc_id in hidden)


def test_a_store_from_before_permissions_serves_its_owner_and_refuses_others(settings) -> None:
    require_tools()
    with local_people(2, 2, seed=3) as people, open_folder("kbsync-perms-legacy") as base:
        root = base / "share"
        files = random_share(root, people, seed=3, tops=1, per_folder=2)
        _sync(settings, root)
        _forget_permissions(settings)
        assert _visible(settings, None) == _doc_ids(root, set(files))  # the owner, as before
        with pytest.raises(PermissionsNotCaptured, match="run `kbsync ingest`"):
            api.search("volcano", settings=settings, as_user=people.users[0])
        healed = _sync(settings, root)
        assert healed.permissions_updated == len(files) and healed.embeddings_computed == 0
        for user in people.users:
            assert _visible(settings, user) == _doc_ids(root, kernel_readable(user, files))


def _forget_permissions(settings) -> None:
    """Make the store look written before permissions: no ``access`` on points or records,
    no profiles, no captured roots, and no kept listing (kbsync.ingest.listing came after
    permissions; its marks hold the permissions the walk saw)."""
    from kbsync.catalog.access import CAPTURED, PROFILE
    from kbsync.catalog.state import CHUNK_TOTAL, META_KEY
    from kbsync.store.base import Filter

    rt = Runtime.open(settings)
    try:
        store = rt.store
        for name in (rt.collection, settings.state_collection):
            points = list(store.scroll(name, with_vectors=True))
            for point in points:
                point.payload.pop("access", None)
            store.delete(name, Filter.where(**{META_KEY: PROFILE}))
            store.delete(name, Filter.where(**{META_KEY: CAPTURED}))
            store.delete(name, Filter.where(**{META_KEY: CHUNK_TOTAL}))
            gone = (PROFILE, CAPTURED, CHUNK_TOTAL)
            keep = [p for p in points if p.payload.get(META_KEY) not in gone]
            for point in keep:
                point.vector = point.vector["dense"] if isinstance(point.vector, dict) else point.vector
            store.upsert(name, keep)
    finally:
        rt.close()
