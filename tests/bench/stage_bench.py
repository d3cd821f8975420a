"""Per-stage costs of an ingest on real shares, one thread, no Prefect (docs/SCALING.md's inputs).

    nice -n 5 .venv/bin/python tests/bench/stage_bench.py
        [--shares octave-html:200,postgresql-html:200,handbook-zh-html:60,texlive-pdf:6]
        [--model-chunks 256] [--json-out FILE]

For each share of tests/realshares.py (Debian documentation packages from
``~/.cache/kbsync-real-shares``; held-out packages are refused there), into a
fresh embedded store, through the runner's own stage functions in this thread:
plan (discover, hash, diff), convert (in process: the isolation's ~1-3 ms per
file is left out), chunk, embed with the hash provider, write (upsert, delete
stale, commit state: the embedded engine). Conversion is timed per file kind;
PDFs also per page. Then ``--model-chunks`` chunk texts of the first share are
embedded by the default local model (cold cache; the model's load is not
timed), so the hash figure sits beside a real model's. Each stage is timed in
wall seconds and in this process's CPU seconds (every thread: the engine's,
torch's), the core-seconds docs/SCALING.md adds up; on a loaded machine the CPU
figure is the steadier one. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parents[1])]

import realshares  # noqa: E402


def _settings(home: Path, **extra: str):
    from kbsync.settings import Settings

    for key in [k for k in os.environ if k.startswith("KBSYNC_")]:
        del os.environ[key]
    os.environ.update(KBSYNC_HOME=str(home), KBSYNC_CONVERT_ISOLATION="false", **extra)
    return Settings()


def _pages(paths: list[Path]) -> int:
    import pymupdf

    total = 0
    for path in paths:
        with pymupdf.open(path) as doc:
            total += doc.page_count
    return total


def measure_share(name: str, count: int | None, work: Path) -> tuple[dict, list[str]]:
    """One share through the stages; its figures and its chunk texts."""
    from kbsync.runtime import Runtime
    from kbsync.ingest import room, steps
    from kbsync.ingest.discover import parse_root
    from kbsync.ingest.stages import chunk_stage, convert_stage, embed_stage

    share = work / name
    realshares.build_share(realshares.SPECS[name], share, count)
    runtime = Runtime.open(_settings(work / f"home-{name}", KBSYNC_EMBED_PROVIDER="hash"))
    figures: dict = {"share": name, "convert_s": {}, "files": {}}
    try:
        runtime.ensure_collection()
        figures["plan_s"], rp = _timed(steps.plan, runtime, parse_root(str(share)), "bench",
                                       _full(), False, [], [], _guard())
        by_kind = defaultdict(list)
        for item in rp.to_process():
            by_kind[item.file.path.suffix.lower()].append(item)
        convert_results = []
        for kind, items in sorted(by_kind.items()):
            figures["convert_s"][kind], result = _timed(
                convert_stage, items, max_bytes=runtime.config.max_file_bytes,
                converter=runtime.converter())
            convert_results.append(result)
            figures["files"][kind] = len(items)
        pdfs = [i.file.path for i in by_kind.get(".pdf", [])]
        figures["pdf_pages"] = _pages(pdfs) if pdfs else 0
        works = [w for r in convert_results for w in r.work]
        figures["failed"] = sum(len(r.failures) for r in convert_results)
        figures["chunk_s"], chunked = _timed(chunk_stage, works, config=runtime.chunk_config)
        texts = [c.text for w in chunked.work for c in w.chunks]
        figures["chunks"] = len(texts)
        figures["embed_hash_s"], embedded = _timed(
            embed_stage, chunked.work, service=runtime.service,
            contextual=runtime.config.contextual_text)
        figures["write_s"], written = _timed(room.write_batch, embedded.work, runtime,
                                             namespace="bench", run_id="bench")
        figures["points"] = runtime.store.count(runtime.collection)
        figures["failed"] += len(chunked.failures) + len(written.failures)
    finally:
        runtime.close()
    return figures, texts


def _timed(fn, *args, **kwargs):
    """``fn``'s (wall s, CPU s) and result."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn(*args, **kwargs)
    return (time.perf_counter() - wall, time.process_time() - cpu), result


def _full():
    from kbsync.models import SyncMode

    return SyncMode.FULL


def _guard():
    from kbsync.ingest.plan import DeleteGuard

    return DeleteGuard()


def measure_model(texts: list[str], work: Path) -> dict:
    """The default local model on ``texts`` (cold cache, load not timed)."""
    from kbsync.embed import build_embedding_service

    settings = _settings(work / "home-model")
    service = build_embedding_service(settings)
    service.embed_passages(["warm up the model"])
    seconds, _ = _timed(service.embed_passages, texts)
    return {"model": settings.embed_model_name(), "chunks": len(texts), "seconds": seconds}


def report(rows: list[dict], model: dict | None) -> str:
    """The per-stage table: wall and CPU milliseconds per unit, units per CPU second."""
    lines = [f"{'share':<17} {'stage':<14} {'units':>7} {'unit':<6} {'wall ms':>9} "
             f"{'CPU ms':>9} {'per CPU s':>10}", "-" * 78]

    def line(share: str, stage: str, units: int, unit: str, seconds: tuple) -> None:
        wall, cpu = seconds
        if units:
            lines.append(f"{share:<17} {stage:<14} {units:>7} {unit:<6} "
                         f"{1000 * wall / units:>9.2f} {1000 * cpu / units:>9.2f} "
                         f"{units / max(cpu, 1e-9):>10.1f}")

    for row in rows:
        files = sum(row["files"].values())
        line(row["share"], "plan", files, "file", row["plan_s"])
        for kind, seconds in row["convert_s"].items():
            line(row["share"], f"convert {kind}", row["files"][kind], "file", seconds)
            if kind == ".pdf":
                line(row["share"], "convert .pdf", row["pdf_pages"], "page", seconds)
        line(row["share"], "chunk", row["chunks"], "chunk", row["chunk_s"])
        line(row["share"], "embed hash", row["chunks"], "chunk", row["embed_hash_s"])
        line(row["share"], "write (edge)", row["points"], "point", row["write_s"])
    if model:
        line("(first share)", "embed model", model["chunks"], "chunk", model["seconds"])
        lines.append(f"model: {model['model']} (the default local model)")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shares",
                        default="octave-html:200,postgresql-html:200,handbook-zh-html:60,"
                                "texlive-pdf:6")
    parser.add_argument("--model-chunks", type=int, default=256,
                        help="chunks the default local model embeds (0: skip)")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    rows, first_texts = [], []
    with tempfile.TemporaryDirectory(prefix="stage-bench-") as tmp:
        for spec in args.shares.split(","):
            name, _, count = spec.partition(":")
            figures, texts = measure_share(name, int(count) if count else None, Path(tmp))
            first_texts = first_texts or texts
            rows.append(figures)
            print(f"  {name}: done ({figures['failed']} failed files)", flush=True)
        model = (measure_model(first_texts[:args.model_chunks], Path(tmp))
                 if args.model_chunks and first_texts else None)
    print(f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} at the end")
    print(report(rows, model))
    if args.json_out:
        args.json_out.write_text(json.dumps({"shares": rows, "model": model}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
