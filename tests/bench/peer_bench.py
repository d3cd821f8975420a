"""First ingest of a real share: kbsync beside LangChain's ``index()``, in one run.

    python tests/bench/peer_bench.py [--share octave-html:300] [--repeat 1]
        [--kbsync LABEL=DIR ...] [--work DIR] [--peer bs4-memory|markitdown-qdrant]
        [--peer-venv DIR] [--noop] [--running-server]

Both sides get the same files (a deterministic subset of a Debian documentation package,
tests/realshares.py; never a held-out package) and embed with a deterministic hashing
embedder of kbsync's ``hash`` dimension (384), so neither side pays for a model:

* **peer**: LangChain ``index()`` (langchain-core 1.8.1) with ``BSHTMLLoader`` (BeautifulSoup
  on lxml: HTML to plain text), ``RecursiveCharacterTextSplitter`` (2,000 characters, 200
  overlap), an ``SQLRecordManager`` on SQLite (file), ``InMemoryVectorStore``, and a hashing
  embedder written like kbsync's (blake2b buckets, sublinear term weights, L2 norm),
  ``cleanup="incremental"``, batches of 100 (``--peer bs4-memory``, the default). ``--peer
  markitdown-qdrant`` is issue 42's peer instead: MarkItDown for the HTML and a
  ``QdrantVectorStore`` on qdrant-client's local mode on disk. It runs in its own virtualenv
  (``~/.cache/kbsync-peer-venv``, created and filled with pinned versions on first use: the
  project's venv is not touched). Its wall time counts the interpreter start and imports, as
  kbsync's does.
* **kbsync**: ``kbsync ingest SHARE --json`` in a child process, every default but
  ``KBSYNC_EMBED_PROVIDER=hash`` and a fresh ``KBSYNC_HOME``: no Prefect API (the runner in
  process; ``--running-server`` adds runs against a ``prefect server start``), isolated conversion, the embedded store written to disk. ``--kbsync LABEL=DIR``
  (repeatable) runs the kbsync of other checkouts instead of this tree's (e.g. ``git
  worktree``s of two commits, for a before/after in the same run, safe from edits in
  progress here); ``LABEL=.`` is this tree.

``--noop`` also times a no-op re-run after each first ingest, of both sides (the peer's with its
record manager kept), and kbsync's twice: the first no-op after a write keeps the root's listing
(one small write), the second finds it kept and writes nothing. Printed: wall seconds of each side, the ratio to the peer's same step
(first ingest: target <= 0.5; no-op: <= 0.05, issue 42), chunks, and
kbsync's own ``duration_s`` and ``stage_s`` (seconds per stage, summed over batches, which
overlap) from its JSON summary; what is left of the wall time outside ``duration_s`` is the
CLI's start, imports (and with a server, the flow run's records) and the shutdown. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parents[1])]

import real_shares  # noqa: E402
import realshares  # noqa: E402

PEER_VENV = Path.home() / ".cache" / "kbsync-peer-venv"
PEER_PACKAGES = ("langchain-core==1.8.1", "langchain-community==0.4.2", "langchain-classic==1.0.8",
                 "langchain-text-splitters==1.1.3", "beautifulsoup4==4.15.0", "lxml==6.1.3",
                 "SQLAlchemy==2.1.9", "greenlet==3.5.6")
PEER_EXTRA = {"bs4-memory": (), "markitdown-qdrant": (
    "markitdown==0.1.9", "langchain-qdrant==1.1.0", "qdrant-client==1.20.0")}
"""Packages beyond PEER_PACKAGES per ``--peer`` flavor: ``bs4-memory`` (BeautifulSoup loader,
in-memory store: the cheapest LangChain setup), ``markitdown-qdrant`` (MarkItDown, Qdrant's local
mode on disk: issue 42's peer). Each flavor has its own virtualenv."""
DIMENSION = 384  # kbsync's hash provider

PEER_SCRIPT = r'''
import hashlib, json, math, re, sys, time, warnings
from collections import Counter
t0 = time.perf_counter()
warnings.filterwarnings("ignore")
from pathlib import Path
from langchain_core.embeddings import Embeddings
from langchain_core.indexing import index
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_classic.indexes import SQLRecordManager
from langchain_community.document_loaders import BSHTMLLoader
from langchain_text_splitters import RecursiveCharacterTextSplitter
flavor = sys.argv[4] if len(sys.argv) > 4 else "bs4-memory"
if flavor == "markitdown-qdrant":  # the issue's peer: MarkItDown, Qdrant's local mode on disk
    from langchain_core.documents import Document
    from langchain_qdrant import QdrantVectorStore
    from markitdown import MarkItDown
    from qdrant_client import QdrantClient
    from qdrant_client.models import Distance, VectorParams
t_import = time.perf_counter() - t0

TOKEN = re.compile(r"([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]+)|([^\W_]+)")

class HashEmbeddings(Embeddings):
    """kbsync's hash provider, restated: the same features, buckets and weights."""
    def __init__(self, dimension):
        self.dimension = dimension
        self.slots = {}
    def _slot(self, token):
        slot = self.slots.get(token)
        if slot is None:
            value = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "little")
            slot = self.slots[token] = ((value >> 1) % self.dimension, 1.0 if value & 1 else -1.0)
        return slot
    def embed_query(self, text):
        tokens = []
        for cjk, word in TOKEN.findall(text.lower()):
            if word:
                tokens.append(word)
            else:
                tokens.extend(cjk)
                tokens.extend(cjk[i:i + 2] for i in range(len(cjk) - 1))
        vector = [0.0] * self.dimension
        for token, tf in (Counter(tokens) or Counter({"\x00empty": 1})).items():
            index_, sign = self._slot(token)
            vector[index_] += sign * (1.0 + math.log(tf))
        norm = math.sqrt(sum(x * x for x in vector)) or 1.0
        return [x / norm for x in vector]
    def embed_documents(self, texts):
        return [self.embed_query(t) for t in texts]

share, db, dimension = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
t = time.perf_counter()
files = sorted(p for p in share.rglob("*") if p.is_file() and p.suffix.lower() in (".html", ".htm"))
docs = []
if flavor == "markitdown-qdrant":
    converter = MarkItDown()
    for path in files:
        docs.append(Document(page_content=converter.convert(str(path)).text_content,
                             metadata={"source": str(path)}))
else:
    for path in files:
        docs.extend(BSHTMLLoader(str(path), open_encoding="utf-8",
                                 bs_kwargs={"features": "lxml"}).load())
t_load = time.perf_counter() - t
t = time.perf_counter()
chunks = RecursiveCharacterTextSplitter(chunk_size=2000, chunk_overlap=200).split_documents(docs)
t_split = time.perf_counter() - t
t = time.perf_counter()
manager = SQLRecordManager("peer", db_url=f"sqlite:///{db}")
manager.create_schema()
if flavor == "markitdown-qdrant":
    client = QdrantClient(path=db + ".qdrant")  # kept between a first ingest and its no-op
    if not client.collection_exists("peer"):
        client.create_collection("peer", vectors_config=VectorParams(size=dimension,
                                                                    distance=Distance.COSINE))
    store = QdrantVectorStore(client=client, collection_name="peer",
                              embedding=HashEmbeddings(dimension))
else:
    store = InMemoryVectorStore(HashEmbeddings(dimension))
result = index(chunks, manager, store, cleanup="incremental", source_id_key="source",
               batch_size=100)
t_index = time.perf_counter() - t
print(json.dumps({"files": len(files), "chunks": len(chunks), "result": dict(result),
                  "stage_s": {"import": round(t_import, 2), "load": round(t_load, 2),
                              "split": round(t_split, 2), "index": round(t_index, 2)}}))
'''


def ensure_peer_venv(venv: Path, flavor: str = "bs4-memory") -> Path:
    """The peer's interpreter, its virtualenv created and filled (pinned) when missing."""
    python = venv / "bin" / "python"
    extra = PEER_EXTRA[flavor]
    modules = "langchain_core, langchain_classic.indexes, langchain_community.document_loaders, " \
        "lxml, greenlet" + (", markitdown, langchain_qdrant" if extra else "")
    probe = [str(python), "-c", f"import {modules}"]
    if python.exists() and subprocess.run(probe, capture_output=True, check=False).returncode == 0:
        return python
    packages = (*PEER_PACKAGES, *extra)
    print(f"# creating the peer's virtualenv {venv} ({', '.join(packages)})", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *packages], check=True)
    subprocess.run(probe, check=True)
    return python


def run_peer(python: Path, share: Path, work: Path, label: str, *, fresh: bool = True,
             flavor: str = "bs4-memory") -> dict:
    """One LangChain index() of ``share``; its JSON plus ``wall_s``. ``fresh``: a new record
    manager (a first ingest); else the one of ``label``'s first ingest (its no-op: every file
    loaded, split and hashed again, each chunk found in the record manager and skipped)."""
    db = work / f"{label.removesuffix('-noop')}.sqlite"
    if fresh:
        db.unlink(missing_ok=True)
        shutil.rmtree(f"{db}.qdrant", ignore_errors=True)
    script = work / "peer_index.py"
    script.write_text(PEER_SCRIPT)
    started = time.perf_counter()
    proc = subprocess.run([str(python), str(script), str(share), str(db), str(DIMENSION), flavor],
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"peer failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    report["wall_s"] = wall
    return report


def run_kbsync(share: Path, work: Path, label: str, code: Path | None,
               api_url: str | None = None, *, fresh: bool = True) -> dict:
    """One first ingest of ``share`` into a fresh KBSYNC_HOME (hash provider, defaults):
    its JSON summary plus ``wall_s`` and ``peak_rss_mb`` (process tree)."""
    home = work / f"home-{label.removesuffix('-noop')}"
    if fresh:
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(mode=0o700)  # kbsync refuses a home others can read (HomeExposed)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KBSYNC_", "PREFECT_API"))}
    env.update(KBSYNC_HOME=str(home), KBSYNC_EMBED_PROVIDER="hash")
    if api_url:
        env["PREFECT_API_URL"] = api_url
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(code), *filter(None, [env.get("PYTHONPATH")])])
    started = time.perf_counter()
    with open(work / f"{label}.stderr", "w") as err:
        # cwd outside any checkout: Prefect puts the cwd on sys.path, which would shadow
        # the PYTHONPATH of another checkout in the conversion workers
        proc = subprocess.Popen([real_shares.KBSYNC, "ingest", str(share), "--json"], env=env,
                                cwd=work, stdout=subprocess.PIPE, stderr=err, text=True)
        with real_shares.TreePeak(proc.pid) as watched:  # waits on the exit, not a poll
            stdout, _ = proc.communicate()
            wall = time.perf_counter() - started
    peak = watched.peak
    if proc.returncode not in (0, 3) or not stdout.strip():
        tail = (work / f"{label}.stderr").read_text(errors="replace").strip()[-500:]
        raise RuntimeError(f"{label}: kbsync exited {proc.returncode}: {tail}")
    summary = json.loads(stdout)
    summary.update(wall_s=wall, peak_rss_mb=peak / 2**20, load=os.getloadavg()[0])
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--share", default="octave-html:300", help="NAME:FILES from tests/realshares.py")
    parser.add_argument("--repeat", type=int, default=1, help="alternate the sides this many times")
    parser.add_argument("--kbsync", action="append", default=[], metavar="LABEL=DIR",
                        help="a kbsync checkout to run (repeatable; default: this tree)")
    parser.add_argument("--running-server", action="store_true",
                        help="also run each kbsync against a `prefect server start` (start not timed)")
    parser.add_argument("--noop", action="store_true",
                        help="after each kbsync first ingest, time a no-op re-run of it")
    parser.add_argument("--work", type=Path, help="work folder (default: a temporary one)")
    parser.add_argument("--peer", choices=sorted(PEER_EXTRA), default="bs4-memory",
                        help="the LangChain setup (markitdown-qdrant: issue 42's peer)")
    parser.add_argument("--peer-venv", type=Path,
                        help=f"the peer's virtualenv (default {PEER_VENV}[-FLAVOR])")
    args = parser.parse_args()
    name, _, count = args.share.partition(":")
    spec = realshares.SPECS[name]
    venv = args.peer_venv or (PEER_VENV if args.peer == "bs4-memory"
                              else PEER_VENV.with_name(f"{PEER_VENV.name}-{args.peer}"))
    python = ensure_peer_venv(venv, args.peer)
    work = args.work or Path(tempfile.mkdtemp(prefix="kbsync-peer-"))
    work.mkdir(parents=True, exist_ok=True)
    share = work / name
    shutil.rmtree(share, ignore_errors=True)
    files = realshares.build_share(spec, share, int(count) if count else None)
    print(f"# first ingest, {len(files)} files of {name} ({spec.note}); load average "
          f"{os.getloadavg()[0]:.1f}; work {work}", flush=True)
    sides = [(f"kbsync {lbl}", None if d in ("", ".") else Path(d).resolve())
             for lbl, _, d in (item.partition("=") for item in args.kbsync)] or [("kbsync", None)]
    rows: list[tuple[str, float, int, dict | None]] = []
    server, api_url = (real_shares.start_prefect_server(_prefect_home(work))
                       if args.running_server else (None, None))
    try:
        _runs(args, python, share, work, sides, api_url, rows)
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
    _print_table(rows)


def _prefect_home(work: Path) -> Path:
    home = work / "prefect-home"
    home.mkdir(exist_ok=True)
    return home


def _runs(args, python: Path, share: Path, work: Path, sides, api_url: str | None,
          rows: list) -> None:
    for i in range(args.repeat):
        peer = run_peer(python, share, work, f"peer{i}", flavor=args.peer)
        rows.append(("langchain index()", peer["wall_s"], peer["chunks"], {"stage_s": peer["stage_s"], "load": os.getloadavg()[0]}))
        print(f"peer run {i + 1}: {peer['wall_s']:.1f} s {peer['result']}", flush=True)
        if args.noop:
            again = run_peer(python, share, work, f"peer{i}-noop", fresh=False, flavor=args.peer)
            rows.append(("langchain index(): no-op re-run", again["wall_s"], again["chunks"],
                         {"stage_s": again["stage_s"], "load": os.getloadavg()[0]}))
            print(f"peer no-op {i + 1}: {again['wall_s']:.1f} s {again['result']}", flush=True)
        runs = [(label, code, None) for label, code in sides]
        runs += [(f"{label}, running server", code, api_url) for label, code in sides if api_url]
        for label, code, url in runs:
            tag = label.replace(" ", "-").replace(",", "")
            summary = run_kbsync(share, work, f"{tag}{i}", code, url)
            rows.append((label, summary["wall_s"], summary.get("chunks_kept", 0), summary))
            print(f"{label} run {i + 1}: {summary['wall_s']:.1f} s (duration_s "
                  f"{summary.get('duration_s')}, added {summary.get('added')}, failed "
                  f"{summary.get('failed')}, peak RSS {summary['peak_rss_mb']:.0f} MB)", flush=True)
            if args.noop:  # the first no-op after a write keeps the root's listing; the
                # second finds it kept (kbsync.ingest.listing): both are timed
                for which in ("", ", again"):
                    again = run_kbsync(share, work, f"{tag}{i}-noop", code, url, fresh=False)
                    rows.append((f"{label}: no-op re-run{which}", again["wall_s"],
                                 again.get("chunks_kept", 0), again))
                    print(f"{label} no-op{which} {i + 1}: {again['wall_s']:.2f} s (unchanged "
                          f"{again.get('unchanged')})", flush=True)


def _print_table(rows: list[tuple[str, float, int, dict | None]]) -> None:
    """One row a run; ``/ peer``: the wall over the peer's mean wall of the same step (a
    no-op re-run against the peer's no-op, a first ingest against its first ingest)."""
    def mean_peer(noop: bool) -> float:
        walls = [wall for label, wall, _, _ in rows
                 if label.startswith("langchain") and ("no-op re-run" in label) == noop]
        return sum(walls) / len(walls) if walls else float("nan")

    print(f"\n# load average {os.getloadavg()[0]:.1f} at the end")
    print("\n| side | wall s | / peer | chunks | in-run s | stages (s; kbsync: summed over batches) "
          "| load (1 min, at its end) |")
    print("|---|---|---|---|---|---|---|")
    for label, wall, chunks, extra in rows:
        peer = mean_peer("no-op re-run" in label)
        extra = extra or {}
        stages = " ".join(f"{k} {v:.1f}" for k, v in (extra.get("stage_s") or {}).items())
        inside = extra.get("duration_s")
        print(f"| {label} | {wall:.2f} | {wall / peer:.3f} | {chunks} | "
              f"{'' if inside is None else f'{inside:.1f}'} | {stages} | "
              f"{extra.get('load', float('nan')):.1f} |")


if __name__ == "__main__":
    main()
