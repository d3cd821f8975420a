"""What the test suite costs: each configuration's wall time side by side, with the load average.

Runs ``python -m pytest -q`` once per configuration, one after the other, in this checkout,
and prints one table: wall seconds, the ratio to the first configuration, tests passed /
failed / skipped (from a JUnit report), the 1-minute load average before and after, and
the sum of the tests' own durations (the work the workers shared). With ``--slowest K``
it also lists the K slowest tests of each run (or of a JUnit file given with ``--junit``,
e.g. a run of an older checkout).

    python tests/bench/suite_bench.py                       # the default tier on 2 and 4 workers
    python tests/bench/suite_bench.py --workers 2,4,6 --slowest 20
    python tests/bench/suite_bench.py --tier slow --workers 4
    python tests/bench/suite_bench.py --junit old.xml --slowest 20   # only list a report

Limits: one run per configuration (the machine's noise is in the load column, not averaged
away); the first configuration also pays any cold cache (mypy's, the models' exports).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def junit_tests(path: Path) -> list[tuple[float, str, str]]:
    """``(seconds, node id, outcome)`` of every test case in a JUnit report, slowest first."""
    found = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome = ("skipped" if case.find("skipped") is not None else
                   "failed" if case.find("failure") is not None or case.find("error") is not None
                   else "passed")
        node = case.get("classname", "").replace(".", "/") + ".py::" + case.get("name", "")
        found.append((float(case.get("time", 0.0)), node, outcome))
    return sorted(found, reverse=True)


def run(tier: str, workers: int, extra: list[str], keep: Path) -> dict:
    """One pytest run of ``tier`` on ``workers`` workers: wall time, counts, loads. Its
    output and JUnit report are kept under ``keep`` (a failure is read there)."""
    keep.mkdir(parents=True, exist_ok=True)
    report = keep / f"{tier}-n{workers}.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"-n{workers}",
           f"--junitxml={report}", *(["-m", "slow"] if tier == "slow" else []), *extra]
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - started
    (keep / f"{tier}-n{workers}.log").write_text(proc.stdout + proc.stderr)
    tests = junit_tests(report) if report.exists() else []
    counts = {k: sum(1 for _, _, o in tests if o == k) for k in ("passed", "failed", "skipped")}
    return {"tier": tier, "workers": workers, "wall": wall, "exit": proc.returncode,
            "load_before": load_before, "load_after": os.getloadavg()[0],
            "work": sum(t for t, _, _ in tests), "tests": tests, **counts,
            "tail": proc.stdout.strip().splitlines()[-1:] if proc.stdout else []}


def table(rows: list[dict]) -> str:
    head = ("| tier | workers | wall (s) | ratio | passed | failed | skipped | exit "
            "| tests' own s | load before | load after |")
    lines = [head, "|---" * 11 + "|"]
    first = rows[0]["wall"] if rows else 1.0
    for r in rows:
        lines.append(f"| {r['tier']} | {r['workers']} | {r['wall']:.0f} | {r['wall'] / first:.2f} "
                     f"| {r['passed']} | {r['failed']} | {r['skipped']} | {r['exit']} "
                     f"| {r['work']:.0f} | {r['load_before']:.2f} | {r['load_after']:.2f} |")
    return "\n".join(lines)


def slowest(tests: list[tuple[float, str, str]], k: int) -> str:
    lines = ["| s | test | outcome |", "|---|---|---|"]
    lines += [f"| {t:.1f} | `{node}` | {outcome} |" for t, node, outcome in tests[:k]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tier", choices=("default", "slow"), default="default")
    parser.add_argument("--workers", default="2,4", help="comma-separated worker counts")
    parser.add_argument("--slowest", type=int, default=0, help="list the K slowest tests")
    parser.add_argument("--junit", type=Path, help="only list the slowest tests of this report")
    parser.add_argument("--keep", type=Path, default=None,
                        help="folder for each run's output and JUnit report (default: a new "
                             "temporary folder, named on stderr)")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)
    if args.junit:
        tests = junit_tests(args.junit)
        print(f"{args.junit}: {len(tests)} tests, {sum(t for t, _, _ in tests):.0f} s of tests")
        print(slowest(tests, args.slowest or 20))
        return 0
    keep = args.keep or Path(tempfile.mkdtemp(prefix="suite-bench-"))
    print(f"outputs and reports: {keep}", file=sys.stderr, flush=True)
    rows = []
    for workers in (int(w) for w in args.workers.split(",")):
        rows.append(run(args.tier, workers, args.pytest_args, keep))
        print(f"done: {args.tier} on {workers} workers in {rows[-1]['wall']:.0f} s "
              f"{' '.join(rows[-1]['tail'])}", file=sys.stderr, flush=True)
    print(table(rows))
    for r in rows if args.slowest else ():
        print(f"\n{args.slowest} slowest, {r['tier']} tier on {r['workers']} workers:")
        print(slowest(r["tests"], args.slowest))
    return 0 if all(r["exit"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
