"""What returning the heap after each seal saves (``kbsync.store.edge.heap``, issue 23).

Writes ``--points`` chunks of kbsync's chunk layout (its payload indexes, a 60-term sparse
vector, a 384-dim dense vector, ~220 words of text) into a new embedded store, sealing every
``SEAL_EVERY`` points as kbsync does, in two fresh processes side by side: kbsync as it runs
(``release_free_heap`` after each seal) and the same with the release turned off. Prints the
writer's anonymous memory (``RssAnon``) after each seal, and the load average.

    .venv/bin/python tests/bench/seal_heap_bench.py --points 160000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

WRITER = textwrap.dedent("""
    import json, random, sys, uuid
    import numpy as np
    from kbsync.catalog.schema import CHUNK_BOOL_INDEXES, CHUNK_INDEXES, CHUNK_INTEGER_INDEXES
    from kbsync.models import SparseVec
    from kbsync.store import Point, layout
    from kbsync.store.edge import seal as edge_seal
    from kbsync.store.edge.store import EdgeStore

    folder, release, points = sys.argv[1], sys.argv[2] == "release", int(sys.argv[3])
    if not release:
        edge_seal.release_free_heap = lambda: False
    rnd, rng = random.Random(3), np.random.default_rng(3)
    words = ("vector store chunk document policy invoice contract section table figure "
             "quarterly report revenue customer support release note install config").split()

    def anon_mib():
        with open("/proc/self/status") as status:
            return next(int(l.split()[1]) for l in status if l.startswith("RssAnon:")) / 1024

    with EdgeStore(folder) as store:
        store.ensure_collection("kb", dimension=384, keyword_indexes=CHUNK_INDEXES, sparse=True,
                                bool_indexes=CHUNK_BOOL_INDEXES,
                                integer_indexes=CHUNK_INTEGER_INDEXES)
        for start in range(0, points, 500):
            vectors = rng.standard_normal((500, 384), dtype=np.float32)
            batch = []
            for i in range(500):
                n = start + i
                indices = sorted({rnd.randrange(1 << 20) for _ in range(60)})
                batch.append(Point(str(uuid.UUID(int=n + 1)), {
                    "namespace": f"ns-{n % 10}", "doc_id": f"r/doc-{n // 20}.md", "root": "r",
                    "folders": ["a", "a/b"], "source_type": "md", "embedding_failed": False,
                    "modified": 1_700_000_000 + n, "payload_version": 3,
                    "text": " ".join(rnd.choice(words) for _ in range(220))},
                    vectors[i].tolist(), SparseVec(indices, [1.0] * len(indices))))
            store.upsert("kb", batch)
            if (start + 500) % layout.SEAL_EVERY == 0:
                print(json.dumps({"points": start + 500, "anon_mib": anon_mib()}), flush=True)
""")


def _run(mode: str, points: int) -> dict[int, float]:
    with tempfile.TemporaryDirectory(prefix=f"kbsync-seal-heap-{mode}-") as folder:
        out = subprocess.run([sys.executable, "-c", WRITER, folder, mode, str(points)],
                             capture_output=True, text=True, cwd=ROOT, check=True)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return {row["points"]: row["anon_mib"] for row in rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=160_000)
    args = parser.parse_args()
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    kept = _run("keep", args.points)
    released = _run("release", args.points)
    print(f"load average before: {load}; after: "
          f"{'/'.join(f'{x:.1f}' for x in os.getloadavg())}")
    print("| points written | anonymous MiB, heap kept | heap returned after each seal | ratio |")
    print("|---:|---:|---:|---:|")
    for points in sorted(kept):
        print(f"| {points:,} | {kept[points]:.0f} | {released[points]:.0f} | "
              f"{released[points] / kept[points]:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
