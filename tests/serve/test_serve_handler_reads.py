"""What one request of ``kbsync serve`` reads: the settings are resolved per request (a
rebuild's swap is served without a restart) through the request's own store, never through a
store opened for the purpose. Found measuring issue 40's load test with the default model: the
local provider's "keep the collection's recorded model" read opened a store per request, which
in ``serve`` is a relay connection to the server itself (socket p50 20.6 ms against 8.5 once it
read through the request's store, 100k chunks)."""

from __future__ import annotations

import pytest

from kbsync.perms.reader import Reader


def test_a_request_reads_the_recorded_model_through_its_own_store(settings, monkeypatch) -> None:
    from kbsync import api
    import kbsync.catalog.model_keep as model_keep
    import kbsync.store as store_module
    from kbsync.serve.handler import Handler

    with api.KnowledgeBase() as kb:
        kb.add_text("Volcano ash notes: the crater vents steam after rain.", "notes/volcano")
    # The local provider with no model configured and no pointer: each resolve asks for the
    # collection's recorded model (the hash provider would skip that read).
    monkeypatch.setattr(model_keep, "model_open", lambda s: True)
    opened = []
    real = store_module.open_store
    monkeypatch.setattr(store_module, "open_store", lambda *a, **k: opened.append(a) or real(*a, **k))
    handler = Handler(settings)
    try:
        reader = Reader.of_process()
        first = handler.handle("search", {"query": "volcano"}, reader)  # the holder opens it
        assert first.error is None and first.result["results"], first
        before = len(opened)
        for op, args in [("search", {"query": "crater steam"}), ("stats", {}),
                         ("search", {"query": "ash", "mode": "dense"})]:
            outcome = handler.handle(op, args, reader)
            assert outcome.error is None, outcome
        assert len(opened) == before, f"{len(opened) - before} stores opened for 3 requests"
    finally:
        handler.close()


@pytest.mark.parametrize("op", ["search", "ask"])
def test_an_unconfigured_chat_model_is_still_one_line_for_ask(settings, op) -> None:
    """``ask`` resolves its chat model inside the request's store call now: still one error."""
    from kbsync import api
    from kbsync.serve.handler import Handler

    with api.KnowledgeBase() as kb:
        kb.add_text("Harbour cranes are inspected every spring.", "notes/harbour")
    handler = Handler(settings)
    try:
        outcome = handler.handle(op, {"query": "cranes"}, Reader.of_process())
        if op == "search":
            assert outcome.error is None and outcome.result["results"]
        else:
            assert outcome.error is not None and "\n" not in str(outcome.error)
    finally:
        handler.close()
