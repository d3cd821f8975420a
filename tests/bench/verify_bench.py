"""What the store-vs-state check costs (a script, not a test).

    python tests/bench/verify_bench.py [--chunks 10000] [--per-doc 1,4]

Loads ``chunks`` chunk points (hash vectors, the payload ``build_points`` writes,
``per-doc`` chunks per document) and their state records into a fresh embedded
store, then times, each the median of 5 runs:

- ``load``: the root's state records, as every ingest's plan reads them anyway;
- ``check``: :func:`kbsync.catalog.checks.check_root` on a sound store, what every
  ingest adds per root (one exact count; no chunk point read);
- ``namespace sum``: what a per-namespace check would add instead (the
  namespace's records read again to sum them, plus one count);
- ``damaged``: :func:`kbsync.catalog.checks.damaged_documents` after one document lost
  its points (one exact count per document: the repair path only);
- ``verify``: ``kbsync verify``'s full scan (every chunk point with its payload).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a plain script from anywhere
    sys.path.insert(0, str(ROOT))


def _load(runtime, chunks: int, per_doc: int) -> None:
    from kbsync.models import Chunk, DocState, DocStatus, SourceFile
    from kbsync.catalog.state import utc_now
    from kbsync.catalog.schema import PreparedDoc, build_points

    points, states = [], []
    for d in range(chunks // per_doc):
        doc_id = f"share/dir{d % 50}/doc{d}.md"
        texts = [f"chunk {j} of document {d}: body words {d * 7 + j} topic-{d}"
                 for j in range(per_doc)]
        source = SourceFile(doc_id=doc_id, root="share", path=Path("/share") / doc_id[6:],
                            rel_path=doc_id[6:], size=100, mtime_ns=1, content_hash="h")
        vectors = runtime.service.embed_passages(texts).vectors
        doc = PreparedDoc(source=source, chunks=[Chunk(doc_id, j, t, "T")
                                                 for j, t in enumerate(texts)],
                          vectors=vectors, failed=[False] * per_doc)
        points.extend(build_points(doc, "default"))
        states.append(DocState(doc_id=doc_id, namespace="default", root="share",
                               path=str(source.path), content_hash="h", fingerprint="f",
                               chunk_count=per_doc, status=DocStatus.OK, updated_at=utc_now(),
                               run_id="bench", size=100, mtime_ns=1))
    for start in range(0, len(points), 1024):
        runtime.store.upsert(runtime.collection, points[start:start + 1024])
    for start in range(0, len(states), 1024):
        runtime.states.commit(states[start:start + 1024])


def _median(fn, runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def bench(chunks: int, per_doc: int) -> dict:
    """Times (seconds) of the four operations on one fresh store."""
    from kbsync.runtime import Runtime
    from kbsync.settings import Settings
    from kbsync.store.base import Filter
    from kbsync.catalog.checks import check_root, damaged_documents, load_documents
    from kbsync.maintenance.verify import verify

    with tempfile.TemporaryDirectory() as tmp:
        os.environ.update(KBSYNC_HOME=tmp, KBSYNC_EMBED_PROVIDER="hash")
        runtime = Runtime.open(Settings())
        try:
            runtime.ensure_collection()
            _load(runtime, chunks, per_doc)
            states = runtime.states.load("default", "share")

            def check():
                return check_root(runtime.store, runtime.collection, "default", "share", states)

            def namespace_sum():
                records = load_documents(runtime.store, runtime.settings.state_collection,
                                         "default")["default"]
                return (sum(s.chunk_count for s in records.values()),
                        runtime.store.count(runtime.collection,
                                            Filter.where(namespace="default")))

            check()  # the first count after a load pays for opening the root index
            out = {"docs": len(states), "chunks": runtime.store.count(runtime.collection),
                   "load": _median(lambda: runtime.states.load("default", "share")),
                   "check": _median(check), "namespace_sum": _median(namespace_sum)}
            assert check().matches
            runtime.store.delete(runtime.collection, Filter.where(doc_id=next(iter(states))))
            out["damaged"] = _median(lambda: damaged_documents(
                runtime.store, runtime.collection, "default", states), runs=3)
            out["verify"] = _median(lambda: verify(
                runtime.store, collection=runtime.collection,
                state_collection=runtime.settings.state_collection), runs=3)
        finally:
            runtime.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--per-doc", default="1,4")
    args = parser.parse_args()
    print("| chunks | docs | plan's record load | check (every ingest) | namespace sum "
          "(not done) | per-doc counts (drift only) | verify |")
    print("|---|---|---|---|---|---|---|")
    for per_doc in (int(x) for x in args.per_doc.split(",")):
        r = bench(args.chunks, per_doc)
        print(f"| {r['chunks']} | {r['docs']} | {r['load'] * 1000:.0f} ms | "
              f"{r['check'] * 1000:.1f} ms | {r['namespace_sum'] * 1000:.0f} ms | "
              f"{r['damaged'] * 1000:.0f} ms | "
              f"{r['verify'] * 1000:.0f} ms |")


if __name__ == "__main__":
    main()
