"""Does ``kbsync verify --repair`` give back the store a clean run makes? (issue 37; a script)

    python tests/bench/repair_parity.py [--damages removed,payload,vectors,state]
                                        [--queries 100] [--packages pandas,sympy,...]

Builds a share of real text: the octave-doc HTML pages (when cached under
``~/.cache/kbsync-real-shares``, as ``tests/bench/real_shares.py`` leaves them) and the
Python sources (files over 2 KB) of some packages of this virtualenv, about 44,000 chunks
with the defaults below, so the chunk collection has two sealed segments. It ingests the
share once (hash embedder, in process), reads ``--queries`` searches (six words of a random
chunk each, dense and hybrid, k=5), then for each damage copies the clean home, damages the
copy as issue 37's hostile user did, runs the real ``kbsync verify --repair`` and searches
again. One row per damage and mode:

- ``docs``/``points``: the repaired store's documents and points equal the clean one's;
- ``same``: queries whose top 5 are the clean store's, scores within 1e-3, the order
  allowed to differ only between exactly tied scores (duplicate texts score alike);
- ``rank-1``: queries whose best hit is the clean store's; ``overlap``: mean top-5 overlap;
- ``set aside``: what the repair moved aside (segments, or the state collection rebuilt);
- ``repair s``: the command's wall time, with the 1-minute load average beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

OCTAVE = (Path.home() / ".cache/kbsync-real-shares/pkgs/octave-doc/usr/share/doc/octave"
          / "octave.html")
PACKAGES = "prefect,sqlalchemy,pydantic,pandas,sympy,networkx,scipy,sklearn"
DAMAGES = ("removed", "payload", "vectors", "state")
K = 5


def build_share(share: Path, packages: list[str]) -> None:
    """octave-doc's HTML (when cached) and the packages' Python files over 2 KB."""
    if OCTAVE.is_dir():
        shutil.copytree(OCTAVE, share / "octave.html")
    site = Path(sysconfig.get_paths()["purelib"])
    for package in packages:
        for source in (site / package).rglob("*.py"):
            if source.stat().st_size > 2048:
                target = share / source.relative_to(site)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)


def env_for(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("KBSYNC_") and k != "PREFECT_API_URL"}
    env.update(KBSYNC_HOME=str(home), KBSYNC_EMBED_PROVIDER="hash",
               KBSYNC_CONVERT_ISOLATION="false")
    return env


def ingest(share: Path, home: Path) -> tuple[int, float]:
    os.environ.update(env_for(home))
    from kbsync.ingest.discover import parse_root
    from kbsync.ingest.runner import run_plain
    from kbsync.runtime import Runtime
    from kbsync.settings import Settings

    began = time.monotonic()
    runtime = Runtime.open(Settings())
    try:
        summary = run_plain([parse_root(str(share))], runtime=runtime)
    finally:
        runtime.close()
    return summary.chunks_kept, time.monotonic() - began


def sample_queries(home: Path, count: int) -> list[str]:
    from kbsync.store.edge.store import EdgeStore

    with EdgeStore(home / "qdrant") as store:
        texts = [p.payload["text"] for p in store.scroll("kbsync")]
    rng, queries = random.Random(7), []
    for text in rng.sample(texts, min(len(texts), count * 4)):
        words = re.findall(r"[A-Za-z]{4,}", text)
        if len(words) >= 8 and len(queries) < count:
            start = rng.randrange(0, len(words) - 6)
            queries.append(" ".join(words[start:start + 6]))
    return queries


def answers(home: Path, queries: list[str]) -> dict:
    """Per mode, the top 5 of each query as ``(doc_id, chunk, score)``; and the stats."""
    from kbsync import api
    from kbsync.settings import Settings

    os.environ.update(env_for(home))
    out: dict = {}
    with api.KnowledgeBase(Settings()) as kb:
        for mode in ("dense", "hybrid"):
            out[mode] = [[(h.doc_id, h.chunk_index, h.score) for h in
                          kb.search(q, k=K, mode=mode).results] for q in queries]
        out["stats"] = kb.stats().to_dict()
    return out


def same_up_to_ties(got: list, want: list) -> bool:
    if len(got) != len(want) or any(abs(a[2] - b[2]) > 1e-3 for a, b in zip(got, want)):
        return False
    last = want[-1][2] if want else 0.0
    above = lambda hits: {h[:2] for h in hits if h[2] > last + 1e-3}  # noqa: E731
    return above(got) == above(want)


def damage(home: Path, kind: str) -> None:
    from kbsync.store.edge import seals

    chunks = home / "qdrant" / "kbsync"
    victim = sorted(seals.sealed_segments(chunks).values())[0]
    rot = random.Random(1)
    if kind == "removed":
        shutil.rmtree(victim)
    elif kind == "payload":
        _randomize(victim / "payload_storage" / "page_0.dat", 3 << 20, rot)
    elif kind == "vectors":
        for name in ("matrix.dat", "quantized.data"):
            _randomize(victim / "vector_storage-dense" / name, None, rot)
    else:
        for page in (home / "qdrant" / "kbsync_state").glob("segments/*/payload_storage/page_*.dat"):
            _randomize(page, 2 << 20, rot, start=0)  # its first 2 MB, as the issue did


def _randomize(path: Path, length: int | None, rot: random.Random,
               start: int | None = None) -> None:
    size = path.stat().st_size
    if start is None:  # the middle, as the issue did
        start = max(0, (size - (length or size)) // 2)
    with path.open("r+b") as handle:
        handle.seek(start)
        handle.write(rot.randbytes(min(size, length or size)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--damages", default=",".join(DAMAGES))
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--packages", default=PACKAGES)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kbsync-repair-parity-"))
    try:
        share, clean = work / "share", work / "clean"
        build_share(share, args.packages.split(","))
        chunks, took = ingest(share, clean)
        queries = sample_queries(clean, args.queries)
        want = answers(clean, queries)
        print(f"share: {sum(1 for p in share.rglob('*') if p.is_file()):,} files, {chunks:,} "
              f"chunks, ingest {took:.0f} s; {len(queries)} queries, k={K}; "
              f"{os.cpu_count()} CPUs")
        print(f"{'damage':<8} {'mode':<7} {'docs':>5} {'points':>6} {'same':>7} {'rank-1':>7} "
              f"{'overlap':>7} {'set aside':>10} {'repair s':>8} {'load':>5}")
        for kind in args.damages.split(","):
            home = work / kind
            shutil.copytree(clean, home)
            damage(home, kind)
            load, began = os.getloadavg()[0], time.monotonic()
            done = subprocess.run([str(Path(sys.executable).with_name("kbsync")), "verify",
                                   "--repair", "--json"], env=env_for(home),
                                  capture_output=True, text=True)
            seconds = time.monotonic() - began
            if done.returncode:
                print(f"{kind:<8} repair failed (exit {done.returncode}): "
                      f"{done.stderr.strip()[-200:]}")
                continue
            report = json.loads(done.stdout)
            aside = (f"{sum(len(a.get('segments') or [1]) for a in report['set_aside'])} "
                     f"{'state' if report.get('state_rebuilt') else 'seg'}")
            got = answers(home, queries)
            counts = [(ns, v["documents"], v["chunks"]) for ns, v in
                      sorted(got["stats"]["namespaces"].items())], [
                (ns, v["documents"], v["chunks"]) for ns, v in
                sorted(want["stats"]["namespaces"].items())]
            docs = [c[:2] for c in counts[0]] == [c[:2] for c in counts[1]]
            points = counts[0] == counts[1]
            for mode in ("dense", "hybrid"):
                pairs = list(zip(got[mode], want[mode]))
                same = sum(same_up_to_ties(g, w) for g, w in pairs)
                rank1 = sum(bool(g and w and g[0][:2] == w[0][:2]) for g, w in pairs)
                overlap = sum(len({h[:2] for h in g} & {h[:2] for h in w}) for g, w in pairs)
                print(f"{kind:<8} {mode:<7} {'yes' if docs else 'NO':>5} "
                      f"{'yes' if points else 'NO':>6} {same:>3}/{len(pairs):<3} "
                      f"{rank1:>3}/{len(pairs):<3} {overlap / (K * len(pairs)):>7.3f} {aside:>10} "
                      f"{seconds:>8.1f} {load:>5.1f}", flush=True)
            json.dumps(got["stats"])  # the repaired stats are valid JSON
            shutil.rmtree(home)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
