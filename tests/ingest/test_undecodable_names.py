"""File names that are not valid UTF-8 (issue 10.1), on both adapters.

Old SMB/NFS shares hold Latin-1 names. Python hands such a name over with
``surrogateescape`` surrogates, which no engine accepts in a payload. kbsync
stores the display form instead (undecodable bytes as ``\\xNN``, exactly as in
the doc_id) and keeps the real OS path for reading; the file is indexed, and a
re-run matches its state record (unchanged, nothing read).
"""

from __future__ import annotations

import json
import os
from pathlib import Path


from kbtest import other_warnings, write_tree
from kbsync.ingest.discover import local_root, parse_root, root_parameter
from kbsync.ingest.runner import run_plain
from kbsync.query.search import search
from kbsync.store.base import Filter

LATIN1 = b"lat\xe9in1.md"  # "latéin1.md" in Latin-1: not valid UTF-8
STRAY = b"notes\xff.txt"  # no heading: its title comes from the file name


def _make_share(root: Path) -> Path:
    write_tree(root, {"good.md": "# Good\n\nPlain ascii body about apples.",
                      "d5/other.md": "# Other\n\nAnother body about pears."})
    with open(os.path.join(os.fsencode(root / "d5"), LATIN1), "w", encoding="utf-8") as fh:
        fh.write("# Latin\n\nThe body of the Latin-1 named file mentions quinces.\n")
    with open(os.path.join(os.fsencode(root), STRAY), "w", encoding="utf-8") as fh:
        fh.write("Notes without a heading, about plums.\n")
    return root



def _run(runtime, share: Path) -> dict:
    return run_plain([parse_root(str(share))], runtime=runtime).to_dict()


def _utf8_strings(value) -> None:
    """Every string in ``value`` (nested) encodes as strict UTF-8."""
    if isinstance(value, str):
        value.encode("utf-8")
    elif isinstance(value, dict):
        for key, item in value.items():
            _utf8_strings(key)
            _utf8_strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _utf8_strings(item)


def test_latin1_names_are_indexed_escaped_and_rerun_unchanged(adapter_runtime, tmp_path):
    runtime = adapter_runtime
    share = _make_share(tmp_path / "share")
    first = _run(runtime, share)
    assert (first["files_seen"], first["added"], first["failed"]) == (4, 4, 0), first["failures"]
    json.dumps(first, ensure_ascii=False).encode("utf-8")

    points = {p.payload["doc_id"]: p.payload
              for p in runtime.store.scroll(runtime.collection, Filter.where(namespace="default"))}
    latin = "share/d5/lat\\xe9in1.md"
    assert set(points) == {"share/good.md", "share/d5/other.md", latin, "share/notes\\xff.txt"}
    for payload in points.values():
        _utf8_strings(payload)
    assert points[latin]["path"] == f"{share.resolve()}/d5/lat\\xe9in1.md"
    assert points[latin]["rel_path"] == "d5/lat\\xe9in1.md"
    assert points["share/notes\\xff.txt"]["title"] == "notes\\xff"

    records = runtime.states.load("default", "share")
    assert records[latin].path == points[latin]["path"]
    for record in records.values():
        _utf8_strings(record.to_payload())

    hits = search("quinces", store=runtime.store, service=runtime.service,
                  collection=runtime.collection, k=1).results
    assert [h.doc_id for h in hits] == [latin]

    again = _run(runtime, share)
    assert (again["unchanged"], again["added"], again["updated"], again["files_hashed"]) == \
        (4, 0, 0, 0)

    # The plan still finds the file through its real path: a change is seen and indexed.
    with open(os.path.join(os.fsencode(share / "d5"), LATIN1), "a", encoding="utf-8") as fh:
        fh.write("\nA new line about medlars.\n")
    changed = _run(runtime, share)
    assert (changed["updated"], changed["unchanged"], changed["failed"]) == (1, 3, 0)
    hits = search("medlars", store=runtime.store, service=runtime.service,
                  collection=runtime.collection, k=1).results
    assert [h.doc_id for h in hits] == [latin]


def test_a_broken_latin1_file_fails_alone_with_utf8_fields(runtime, tmp_path):
    share = _make_share(tmp_path / "share")
    with open(os.path.join(os.fsencode(share), b"kaputt\xe9.docx"), "wb") as fh:
        fh.write(b"PK\x03\x04 this is not a zip archive" * 20)
    summary = _run(runtime, share)
    assert (summary["added"], summary["failed"]) == (4, 1)
    [failure] = summary["failures"]
    assert failure["doc_id"] == "share/kaputt\\xe9.docx"
    assert failure["error"] == "CorruptDocument"
    assert failure["path"] == f"{share.resolve()}/kaputt\\xe9.docx"
    assert failure["message"].startswith(failure["path"])
    json.dumps(summary, ensure_ascii=False).encode("utf-8")
    assert _run(runtime, share)["failed"] == 1  # retried, fails alone again


def test_a_root_folder_named_in_latin1_gets_an_escaped_name(runtime, tmp_path):
    raw = os.path.join(os.fsencode(tmp_path), b"archiv\xe9")
    os.mkdir(raw)
    share = Path(os.fsdecode(raw))
    write_tree(share, {"a.md": "# A\n\nalpha", "sub/b.md": "# B\n\nbravo"})
    spec = parse_root(str(share))
    assert spec.name == "archiv\\xe9" and spec.path == share.resolve()
    first = _run(runtime, share)
    assert (first["added"], first["failed"], first["roots"]) == (2, 0, ["archiv\\xe9"])
    records = runtime.states.load("default", "archiv\\xe9")
    assert sorted(records) == ["archiv\\xe9/a.md", "archiv\\xe9/sub/b.md"]
    assert records["archiv\\xe9/a.md"].path == f"{tmp_path.resolve()}/archiv\\xe9/a.md"
    again = _run(runtime, share)
    assert (again["unchanged"], again["files_hashed"]) == (2, 0)


def test_root_arguments_travel_as_utf8_and_come_back(tmp_path):
    raw = os.path.join(os.fsencode(tmp_path), b"archiv\xe9")
    os.mkdir(raw)
    spec = os.fsdecode(raw)
    sent = root_parameter(spec)
    assert sent == f"{tmp_path}/archiv\\xe9" and sent.encode("utf-8")
    assert local_root(sent) == spec
    assert local_root(root_parameter(f"old={spec}")) == f"old={spec}"
    # A folder really named with a backslash wins over the unescaped reading.
    literal = tmp_path / "lit\\xe9"
    literal.mkdir()
    assert local_root(str(literal)) == str(literal)
    assert local_root(f"{tmp_path}/gone\\xe9") == f"{tmp_path}/gone\\xe9"


def test_a_name_that_shows_like_another_is_skipped_and_reported(runtime, tmp_path):
    share = tmp_path / "share"
    write_tree(share, {"lat\\xe9in1.md": "# Literal\n\nspelled with a backslash, about figs."})
    with open(os.path.join(os.fsencode(share), LATIN1), "w", encoding="utf-8") as fh:
        fh.write("# Latin\n\nthe Latin-1 name, about dates.\n")
    first = _run(runtime, share)
    assert (first["files_seen"], first["added"], first["failed"]) == (1, 1, 0)
    [warning] = other_warnings(first["warnings"])
    assert warning == (f"{share.resolve()}/lat\\xe9in1.md: skipped: its name shows as "
                       "share/lat\\xe9in1.md, the doc_id of another file (one spelled with a "
                       "literal \\x); rename one of them")
    assert _hits(runtime, "figs") == ["share/lat\\xe9in1.md"]
    again = _run(runtime, share)  # no churn between the two files
    assert (again["unchanged"], again["files_hashed"]) == (1, 0)


def _hits(runtime, query: str) -> list[str]:
    return [h.doc_id for h in search(query, store=runtime.store, service=runtime.service,
                                     collection=runtime.collection, k=1).results]
