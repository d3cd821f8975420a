"""Short failure messages for the artifacts: no path, whatever the order of the names."""

from __future__ import annotations

from kbsync.ingest.report import short_message


def test_the_path_goes_even_when_the_doc_id_is_its_tail() -> None:
    failure = {"path": "/tmp/x/share/broken.pdf", "doc_id": "share/broken.pdf",
               "message": "/tmp/x/share/broken.pdf: not a readable PDF (share/broken.pdf)"}
    assert short_message(failure) == "not a readable PDF (<file>)"


def test_long_messages_are_cut() -> None:
    failure = {"path": "a", "doc_id": "a", "message": "x" * 500}
    assert len(short_message(failure, limit=50)) == 50
