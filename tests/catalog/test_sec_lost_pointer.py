"""A lost active pointer after ONE swap (issue 37): the replaced collection is still there,
so without a record of the swap every command would silently serve it again.

Each swap writes the pointer and a second copy inside the store folder, with a generation
number; a lost pointer is recovered from the copy (one warning, written back). With both
lost, the build record the swap left in the replaced collection tells that a swap happened:
every command is refused, naming ``kbsync rebuild --restore``, until one is restored (a
crashed first rebuild's shadow beside a never-replaced collection is still served:
``tests/maintenance/test_sec_rebuild_checks.py``). The CLI story is in
``tests/flows/test_sec_rollback.py``.
Real embedded engine, hash embeddings, the plain ingest runner; no Prefect.
"""

from __future__ import annotations

import logging

import pytest

from kbsync.catalog import active
from kbsync.errors import StoreError
from kbsync.ingest.discover import parse_root
from kbsync.ingest.runner import run_plain
from kbsync.maintenance import rebuild as rb
from kbsync.models import SyncMode
from kbsync.store import active as pointer
from kbtest import shadow_runtime, write_tree


def _swapped_once(runtime, tmp_path) -> None:
    """``kbsync`` built, rebuilt into ``kbsync__r1`` and swapped: ``kbsync`` kept."""
    share = tmp_path / "a"
    write_tree(share, {f"d{i}.md": f"# alpha {i}\n\nText alpha {i}." for i in range(3)})
    roots = [parse_root(f"a={share}")]
    assert run_plain(roots, runtime=runtime).added == 3
    run_plain(roots, runtime=shadow_runtime(runtime), mode=SyncMode.FULL)
    plan = rb.RebuildPlan(logical="kbsync", live="kbsync", shadow="kbsync__r1", previous=None,
                          roots={"default": [f"a={share}"]}, live_build={},
                          target_build={"chunk_tokens": 64})
    record = rb.swap(plan, runtime.settings, runtime.store)
    assert (record["active"], record["previous"], record["generation"]) == (
        "kbsync__r1", "kbsync", 1)


def test_a_swap_writes_two_copies_and_a_lost_pointer_is_recovered(runtime, tmp_path, caplog):
    settings = runtime.settings
    _swapped_once(runtime, tmp_path)
    first = pointer.read_pointer(settings.home, "kbsync")
    assert pointer.read_mirror(settings.home, "kbsync") == first
    assert pointer.mirror_path(settings.home, "kbsync").parent.parent == settings.store_path
    assert active.collection_names(settings) == ["kbsync", "kbsync__r1", "kbsync__r1_state",
                                                 "kbsync_state"]  # the copy is no collection

    pointer.pointer_path(settings.home, "kbsync").unlink()
    with caplog.at_level(logging.WARNING, logger="kbsync.catalog.active"):
        resolved = active.resolve(settings, runtime.store)
    assert (resolved.collection, resolved.chunk_tokens) == ("kbsync__r1", 64)
    assert "was lost: recovered from its copy" in caplog.text
    assert "generation 1" in caplog.text
    assert pointer.read_pointer(settings.home, "kbsync") == first  # written back
    active.check_still_active(resolved, runtime.store)

    back = rb.rollback(settings, runtime.store)
    assert (back["active"], back["generation"]) == ("kbsync", 2)
    assert pointer.read_mirror(settings.home, "kbsync").active == "kbsync"


def test_a_lost_pointer_and_copy_after_one_swap_are_refused(runtime, tmp_path):
    settings = runtime.settings
    _swapped_once(runtime, tmp_path)
    for copy in ("deleted", "naming a dropped collection"):
        pointer.pointer_path(settings.home, "kbsync").unlink()
        mirror = pointer.mirror_path(settings.home, "kbsync")
        if copy == "deleted":
            mirror.unlink()
        else:
            pointer.write_pointer(settings.home, pointer.ActiveRecord("kbsync", "kbsync__r9"))
            pointer.pointer_path(settings.home, "kbsync").unlink()
            assert pointer.read_mirror(settings.home, "kbsync").active == "kbsync__r9"
        for call in (lambda: active.resolve(settings, runtime.store),
                     lambda: rb.rollback(settings, runtime.store)):
            with pytest.raises(StoreError) as refused:
                call()
            line = str(refused.value)
            assert "\n" not in line
            assert "rebuilt collections kbsync__r1 exist and it was replaced by one" in line, line
            assert "kbsync rebuild --restore kbsync__r1" in line, line
        record = rb.restore(settings, "kbsync__r1", runtime.store)
        assert (record["active"], record["previous"]) == ("kbsync__r1", "kbsync")
        assert active.resolve(settings, runtime.store).collection == "kbsync__r1"
        assert pointer.read_mirror(settings.home, "kbsync").active == "kbsync__r1"


def test_a_reader_during_the_first_swap_is_never_refused(runtime, tmp_path, monkeypatch):
    """The swap's build record marks the logical collection replaced; written before the first
    pointer, a reader in between (``kbsync serve`` did, in CI) was refused as if the pointer
    were lost. Each write of the swap is watched by a reader resolving at that moment."""
    settings = runtime.settings
    seen: list[str] = []

    def reader() -> None:
        seen.append(active.resolve(settings.model_copy(), runtime.store).collection)

    def watched(write):
        def call(*args, **kwargs):
            reader()
            result = write(*args, **kwargs)
            reader()
            return result
        return call

    monkeypatch.setattr(active, "write_build", watched(active.write_build))
    monkeypatch.setattr(pointer, "write_pointer", watched(pointer.write_pointer))
    _swapped_once(runtime, tmp_path)
    assert seen[0] == "kbsync" and seen[-1] == "kbsync__r1" and len(seen) >= 4


def test_a_reader_whose_reads_straddle_the_first_swap_is_never_refused(runtime, tmp_path,
                                                                       monkeypatch):
    """A reader that found no pointer (before the swap) and then, the swap done meanwhile,
    found the collection replaced, was refused as if the pointer were lost (``kbsync serve``'s
    rebuild test, in CI): the swap runs between its pointer read and the rest."""
    settings = runtime.settings
    _swapped_once(runtime, tmp_path)
    real = pointer.read_pointer
    reads: list[int] = []

    def before_the_swap_once(home, logical):
        reads.append(1)
        return None if len(reads) == 1 else real(home, logical)
    monkeypatch.setattr(pointer, "read_pointer", before_the_swap_once)
    monkeypatch.setattr(active, "recover", lambda settings: None)  # no copy seen either
    resolved = active.resolve(settings.model_copy(), runtime.store)
    assert resolved.collection in ("kbsync", "kbsync__r1")
