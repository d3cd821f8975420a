"""Dask benchmark: the ingest flow on the thread runner, and on 1 and 2 Dask worker processes.

    nice -n 5 .venv/bin/python tests/bench/dask_bench.py [--share octave-html:300]
        [--workers 1,2] [--threads 3] [--files-per-batch 32] [--rounds 1] [--json-out FILE]

One real share (tests/realshares.py: a Debian documentation package from
``~/.cache/kbsync-real-shares``; held-out packages are refused there), the hash
embedder (so conversion, not the model, is the work), isolated conversion (the
default), ``--files-per-batch`` files a batch (the default's 32; a share of a few
large PDFs needs smaller batches to give each worker some). Each configuration ingests the share into a fresh
``KBSYNC_HOME`` through the real ``ingest`` flow, in this process, against one
Prefect test server (its start-up is not timed). A run's wall time includes
starting its task runner: a Dask ``LocalCluster``'s worker processes import
kbsync and Prefect and start their converter, on every run (the cluster lives
for one root's subflow). So the run's *batch span* is read back from Prefect:
from the first ``batch`` task run's start to the last ``batch``/``write`` task
run's end, the part of the run that more workers can shorten; files/s is over
that span. Rounds alternate the order of the configurations; the table gives
each run and the ratio of its span files/s to the first Dask configuration's in
its round.

On the embedded store the Dask workers convert, chunk and embed, and the flow's
process writes (``flows/executor.py``). Every run must add every file and give
the same number of chunks; the script exits 1 otherwise. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parents[1])]

import realshares  # noqa: E402


def parse_share(text: str) -> tuple[str, int | None]:
    """``NAME`` or ``NAME:N`` -> (name, N or None)."""
    name, _, count = text.partition(":")
    return name, int(count) if count else None


def configurations(workers: list[int], threads: int) -> list[tuple[str, dict]]:
    """(label, environment) for the thread runner and each Dask worker count."""
    runs = [(f"threads x{threads}", {"KBSYNC_TASK_RUNNER": "threads",
                                     "KBSYNC_TASK_WORKERS": str(threads)})]
    runs += [(f"dask x{n}", {"KBSYNC_TASK_RUNNER": "dask", "KBSYNC_TASK_WORKERS": str(n)})
             for n in workers]
    return runs


def batch_span(flow_run_id) -> float:
    """Seconds from the first batch task run's start to the last batch/write run's end."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    with get_client(sync_client=True) as client:
        children = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[flow_run_id])))
        runs, page = [], None
        while page is None or len(page) == 200:  # the API's largest page
            page = client.read_task_runs(flow_run_filter=FlowRunFilter(
                id={"any_": [c.id for c in children]}), limit=200, offset=len(runs))
            runs += page
    runs = [r for r in runs if r.name.startswith(("batch ", "write ")) and r.end_time]
    return (max(r.end_time for r in runs) - min(r.start_time for r in runs)).total_seconds()


def run_one(share: Path, work: Path, label: str, env: dict) -> dict:
    """One first ingest of ``share`` into a fresh home; its figures."""
    from flows.ingest import ingest

    home = Path(tempfile.mkdtemp(prefix="home-", dir=work))
    os.environ.update(env, KBSYNC_HOME=str(home))
    started = time.perf_counter()
    state = ingest(roots=[str(share)], namespace="bench", return_state=True)
    wall = time.perf_counter() - started
    summary = state.result(raise_on_failure=False)
    summary = getattr(summary, "result", summary)  # a Failed run's rides on FilesFailed
    span = batch_span(state.state_details.flow_run_id)
    return {"label": label, "wall_s": round(wall, 2), "span_s": round(span, 2),
            "files": summary["files_seen"], "added": summary["added"],
            "failed": summary["failed"], "chunks": summary["chunks_kept"],
            "files_per_s": round(summary["files_seen"] / span, 2)}


def table(rows: list[dict], base: str) -> str:
    """The runs, with files/s as a ratio to the round's ``base`` run."""
    head = f"{'round':>5} {'config':<11} {'wall s':>8} {'span s':>8} {'files':>6} " \
           f"{'chunks':>7} {'span files/s':>12} {'vs ' + base:>12}"
    lines = [head, "-" * len(head)]
    for row in rows:
        lines.append(f"{row['round']:>5} {row['label']:<11} {row['wall_s']:>8.2f} "
                     f"{row['span_s']:>8.2f} {row['files']:>6} {row['chunks']:>7} "
                     f"{row['files_per_s']:>12.2f} {row['ratio']:>11.2f}x")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--share", default="octave-html:300", help="NAME or NAME:N files")
    parser.add_argument("--workers", default="1,2", help="Dask worker counts")
    parser.add_argument("--threads", type=int, default=3, help="thread runner's workers")
    parser.add_argument("--files-per-batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()

    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    for key in [k for k in os.environ if k.startswith("KBSYNC_")]:
        del os.environ[key]
    os.environ.update(KBSYNC_EMBED_PROVIDER="hash", KBSYNC_CONVERT_ISOLATION="true",
                      KBSYNC_FILES_PER_BATCH=str(args.files_per_batch))
    name, count = parse_share(args.share)
    configs = configurations([int(n) for n in args.workers.split(",")], args.threads)
    base_label = configs[min(1, len(configs) - 1)][0]

    from prefect.testing.utilities import prefect_test_harness

    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="dask-bench-") as tmp:
        work = Path(tmp)
        share = work / name
        files = realshares.build_share(realshares.SPECS[name], share, count)
        print(f"share {name}: {len(files)} files, {args.files_per_batch} a batch, hash "
              "embedder, isolated conversion, "
              f"{os.cpu_count()} CPUs (load {os.getloadavg()[0]:.1f} at start)", flush=True)
        with prefect_test_harness(server_startup_timeout=180):
            for number in range(1, args.rounds + 1):
                order = configs if number % 2 else configs[:1] + configs[:0:-1]
                done = [run_one(share, work, label, env) | {"round": number}
                        for label, env in order]
                base = next(r for r in done if r["label"] == base_label)
                for row in done:
                    row["ratio"] = round(row["files_per_s"] / base["files_per_s"], 2)
                    print(f"  {row['label']}: {row['wall_s']} s, batches {row['span_s']} s",
                          flush=True)
                rows += done
    print(table(rows, base_label))
    if args.json_out:
        args.json_out.write_text(json.dumps(rows, indent=2))
    bad = [r for r in rows if r["failed"] or r["added"] != r["files"]
           or r["chunks"] != rows[0]["chunks"]]
    for row in bad:
        print(f"problem: {row['label']} round {row['round']}: added {row['added']} of "
              f"{row['files']}, failed {row['failed']}, {row['chunks']} chunks", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
