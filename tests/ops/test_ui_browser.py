"""The operator's view: a real headless Chromium renders the Prefect UI of a real server.

One ``prefect server start`` with its UI, the ``ci-reindex``, ``rebuild`` and ``rollback``
deployments from prefect.yaml, a process worker (tests/ops/opskit.py), one run with a corrupt
PDF, then a clean run of the same namespace; an evaluation regression, a rebuild over a share
with a known-bad file (its runs not red), its typed form and a rollback from its deployment.
Chromium (Debian's ``chromium``; skipped, saying so, where it is absent) loads the UI's own
routes (``/runs/flow-run/ID``, ``/artifacts/artifact/ID``, from the Prefect 3.9 UI router) and
the test reads the DOM the single-page app rendered, as a person would see it. Screenshots go to the test's tmp dir, and to ``$KBSYNC_TEST_UI_SHOTS``
when that is set.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kbsync.ingest.report import artifact_key
from opskit import ROOT, Stack, cli, deployed_stack, make_share, run_id_of

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NAMESPACE = "ui"
# What Chromium may wait for the SPA's API calls, in virtual time: it only advances when the
# page is idle, so a slow machine makes the run longer, not the page emptier.
BUDGET_MS = "15000"

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install chromium)")]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with deployed_stack(tmp_path_factory.mktemp("ui"),
                        ["-n", "ci-reindex", "-n", "rebuild", "-n", "rollback"],
                        ui=True) as stack:
        yield stack


def _reindex(stack: Stack, share: Path | str) -> tuple[int, str]:
    done = cli(stack, "deployment", "run", "ingest/ci-reindex", "--param",
               f"roots={json.dumps([str(share)])}", "--param", f"namespace={NAMESPACE}",
               "--watch", "--watch-timeout", "180", timeout=240)
    return done.returncode, run_id_of(done.stdout)


def _text(dom: str) -> str:
    """The visible text of a dumped DOM, whitespace collapsed."""
    dom = re.sub(r"<(script|style)\b[^>]*>.*?</\1>", " ", dom, flags=re.DOTALL)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", dom)).split())


def _render(url: str, shot: Path, *needles: str, height: int = 1000) -> str:
    """Load ``url`` in headless Chromium; screenshot it to ``shot``; return the page's text.

    Tries three times until every needle shows: under load the SPA may still be fetching
    when the virtual-time budget ends.
    """
    args = [CHROMIUM, "--headless=new", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
            f"--user-data-dir={shot.parent / 'chromium-profile'}", f"--window-size=1400,{height}",
            f"--virtual-time-budget={BUDGET_MS}", f"--screenshot={shot}", "--dump-dom", url]
    if os.geteuid() == 0:  # Chromium refuses to run its sandbox as root
        args.insert(1, "--no-sandbox")
    for _ in range(3):
        done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr[-2000:]
        text = _text(done.stdout)
        if all(needle in text for needle in needles):
            break
    if os.environ.get("KBSYNC_TEST_UI_SHOTS"):
        keep = Path(os.environ["KBSYNC_TEST_UI_SHOTS"])
        keep.mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, keep / shot.name)
    return text


def test_failed_and_clean_runs_as_the_operator_sees_them(stack, tmp_path):
    share = make_share(stack.tmp / "share", {"good.md": "# Good\n\nFine text.\n",
                                             "empty.md": "",
                                             "broken.pdf": b"%PDF-1.7\n" + os.urandom(600)})
    failed_code, failed_id = _reindex(stack, share)
    (share / "broken.pdf").unlink()
    (share / "empty.md").write_text("# Now\n\nSome text.\n")
    clean_code, clean_id = _reindex(stack, share)
    assert (failed_code, clean_code) == (1, 0)
    key = artifact_key("kbsync-ingest-failures", NAMESPACE)
    failures = {run: {a["key"]: a for a in stack.artifacts([run])}[key]["id"]
                for run in (failed_id, clean_id)}
    ui = stack.api.removesuffix("/api")

    # The run's page: the Failed badge, and the state message (Details tab) gives the count.
    page = _render(f"{ui}/runs/flow-run/{failed_id}?tab=Details", tmp_path / "failed-run.png",
                   "State Message", "files failed")
    assert "Failed" in page and "State Message 2 of 3 files failed" in page, page
    # Named after what it ran, not at random.
    assert "ci-reindex: share incremental" in page, page

    # Its log (the page's first tab) names each failed file at WARNING: the UI's "Warning and
    # above" filter shows these lines, and no traceback.
    page = _render(f"{ui}/runs/flow-run/{failed_id}", tmp_path / "failed-run-log.png",
                   "failed share/broken.pdf", "Finished in state Failed", height=2200)
    assert "failed share/broken.pdf: CorruptDocument: not a readable PDF" in page, page
    assert "failed share/empty.md: EmptyDocument: file is empty" in page, page
    assert re.search(r"WARNING[^A-Z]*failed share/", page, re.IGNORECASE), page
    assert "Traceback" not in page and "stop_flow_watch" not in page, page

    # The failures table of that run names the corrupt file and why.
    page = _render(f"{ui}/artifacts/artifact/{failures[failed_id]}",
                   tmp_path / "failed-run-failures.png", "CorruptDocument")
    assert key in page and "2 Items" in page, page
    assert "share/broken.pdf" in page and "CorruptDocument" in page, page

    # The clean run wrote the same key again, with an empty table.
    page = _render(f"{ui}/artifacts/artifact/{failures[clean_id]}",
                   tmp_path / "clean-run-failures.png", "0 Items")
    assert key in page and "0 Items" in page and "No results" in page, page
    assert "broken.pdf" not in page and "CorruptDocument" not in page, page


def test_a_refusal_reads_as_one_line_not_a_crash(stack, tmp_path):
    """A root name bound to another folder: ``RootConflict``, before anything is written."""
    bound = make_share(stack.tmp / "manuals", {"a.md": "# A\n\nText.\n"})
    other = make_share(stack.tmp / "elsewhere", {"b.md": "# B\n\nText.\n"})
    assert _reindex(stack, bound)[0] == 0
    code, run_id = _reindex(stack, f"manuals={other}")
    assert code == 1
    ui = stack.api.removesuffix("/api")
    page = _render(f"{ui}/runs/flow-run/{run_id}", tmp_path / "refused-run-log.png",
                   "RootConflict", "Finished in state Failed", height=2200)
    assert "RootConflict" in page and "is bound to" in page, page
    assert "Traceback" not in page and 'File "' not in page, page
    assert "Engine execution exited" not in page, page
    summary = {a["key"]: a for a in stack.artifacts([run_id])}[
        artifact_key("kbsync-ingest", NAMESPACE)]
    page = _render(f"{ui}/artifacts/artifact/{summary['id']}", tmp_path / "refused-summary.png",
                   "stopped: RootConflict")
    assert "stopped: RootConflict" in page and "When a run failed" in page, page


EVALUATE = """
import sys
from flows.evaluate import evaluate
state = evaluate(queries_file=sys.argv[1], namespace="default", report_dir=sys.argv[2],
                 return_state=True)
print(state.state_details.flow_run_id)
"""


def _sample_synced(stack: Stack) -> None:
    """data/sample synced into namespace ``default`` by the deployment (once per server)."""
    sample = stack.tmp / "sample"
    if sample.exists():
        return
    shutil.copytree(ROOT / "data" / "sample", sample)
    done = cli(stack, "deployment", "run", "ingest/ci-reindex", "--param",
               f"roots={json.dumps([str(sample)])}", "--param", "namespace=default",
               "--watch", "--watch-timeout", "180", timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_evaluation_trend_and_drops_render_inline(stack, tmp_path):
    """data/sample synced by the deployment, then evaluated twice (as the nightly does) against
    the same server; the second run against a better baseline run: the trend and the drops
    tables of its summary render in the UI."""
    sys.path.insert(0, str(ROOT / "tests" / "flows"))
    from test_eval_story import _worse_baseline

    _sample_synced(stack)
    reports = tmp_path / "reports"
    queries = str(ROOT / "data" / "eval" / "sample_queries.jsonl")

    def evaluate() -> str:
        ran = subprocess.run([sys.executable, "-c", EVALUATE, queries, str(reports)], cwd=ROOT,
                             env=stack.worker_env, capture_output=True, text=True, timeout=300)
        assert ran.returncode == 0, ran.stderr[-3000:]
        return ran.stdout.strip().splitlines()[-1]

    first = evaluate()
    (run,) = [p.name for p in reports.iterdir() if p.is_dir()]
    _worse_baseline(reports, run)
    second = evaluate()
    assert stack.state(first) == "Completed" and stack.state(second) == "Failed"
    summary = {a["key"]: a for a in stack.artifacts([second])}[
        artifact_key("kbsync-eval-summary", "default")]
    ui = stack.api.removesuffix("/api")
    page = _render(f"{ui}/artifacts/artifact/{summary['id']}", tmp_path / "eval-trend.png",
                   "trend", "Biggest per-query drops", height=2400)
    assert "ndcg@10 trend, last 3 runs" in page and "FAILED" in page, page
    assert "better-run" in page and "1.000" in page, page
    assert "Biggest per-query drops of ndcg@10 against the baseline" in page, page
    assert "first relevant rank" in page, page
    page = _render(f"{ui}/runs/flow-run/{second}?tab=Details", tmp_path / "eval-run.png",
                   "State Message")
    assert "evaluate: default hybrid" in page and "retrieval regression" in page, page
    # Its log: one WARNING line (the "Warning and above" view) with what changed and what to do.
    page = _render(f"{ui}/runs/flow-run/{second}", tmp_path / "eval-run-log.png",
                   "accept_regression", "Finished in state Failed", height=1600)
    assert re.search(r"WARNING[^A-Z]*retrieval regression: hybrid", page, re.IGNORECASE), page
    assert "what changed since baseline run better-run" in page, page
    assert "run evaluate again with accept_regression true" in page, page


REBUILD = """
import sys
from flows.rebuild import rebuild
state = rebuild(queries_file=sys.argv[1], namespace="default", max_drop=1.0,
                build={"chunk_tokens": 200}, return_state=True)
print(state.state_details.flow_run_id)
"""


def test_the_rebuild_summary_reads_as_a_story(stack, tmp_path):
    """data/sample in ``default``, then a rebuild with a smaller
    chunk budget, gated loosely (max_drop 1.0) so it swaps; its summary renders the settings
    as a table (live as built: the default budget, not the requested 200), the state check,
    the replay counts and the rollback command; its subflows are tagged."""
    _sample_synced(stack)
    # #41: a known-bad file in the live collection: its sync is red (a new failure), the
    # rebuild's replays of it are not (they fail in live too), and a subflow is never red.
    sample = stack.tmp / "sample"
    (sample / "broken.pdf").write_bytes(b"%PDF-1.7\n" + os.urandom(600))
    done = cli(stack, "deployment", "run", "ingest/ci-reindex", "--param",
               f"roots={json.dumps([str(sample)])}", "--param", "namespace=default",
               "--watch", "--watch-timeout", "180", timeout=240)
    assert done.returncode == 1 and stack.state(run_id_of(done.stdout)) == "Failed"
    queries = str(ROOT / "data" / "eval" / "sample_queries.jsonl")
    ran = subprocess.run([sys.executable, "-c", REBUILD, queries], cwd=ROOT,
                         env=stack.worker_env, capture_output=True, text=True, timeout=400)
    assert ran.returncode == 0, ran.stderr[-3000:]
    run_id = ran.stdout.strip().splitlines()[-1]
    assert stack.state(run_id) == "Completed", stack.get(f"/flow_runs/{run_id}")
    children = stack.children(run_id)
    assert children and all(c["state_type"] != "FAILED" for c in children), \
        [(c["name"], c["state_name"]) for c in children]
    tags = sorted(tuple(sorted(c["tags"])) for c in children)
    # The shadow's build converts the known-bad file (its subflow not red); the replay finds
    # the share unchanged and the file's failure remembered (issue 42): nothing to write, so
    # no replay subflow at all.
    assert any("shadow" in t for t in tags) and not any("replay" in t for t in tags), tags
    summary = {a["key"]: a for a in stack.artifacts([run_id])}[
        artifact_key("kbsync-rebuild-summary", "default")]
    assert "{'" not in summary["data"]  # no raw Python dicts
    ui = stack.api.removesuffix("/api")
    page = _render(f"{ui}/artifacts/artifact/{summary['id']}", tmp_path / "rebuild-summary.png",
                   "Build settings", "rollback", height=2400)
    assert "swapped" in page and "Build settings" in page, page
    # live as built (the default budget), not the 200 requested
    assert "chunk_tokens default 200 changed" in page, page
    assert "State check" in page and "Replay" in page, page
    assert "kbsync rebuild --rollback" in page, page
    # #41: the undo names what a rollback serves, the overridden max_drop shows, and the
    # dimension left to its default is not a change.
    assert "back to `kbsync`" not in summary["data"] and "serve its original build" in page, page
    assert "max_drop 1, overridden (default 0.02)" in page, page
    assert re.search(r"embed_dimensions (?:\d+|default \(\d+\)) default \(\d+\)(?! changed)",
                     page), page
    page = _render(f"{ui}/runs/flow-run/{run_id}?tab=Details", tmp_path / "rebuild-run.png",
                   "State Message")
    assert "rebuild: default chunk_tokens=200" in page, page
    # The run's page as the operator sees it: its graph (the subflows, all green) and its log,
    # where nothing Failed. (The Subflow Runs tab does not open from the URL: the UI hides it
    # until its runs load, so the states are checked through the API above.)
    page = _render(f"{ui}/runs/flow-run/{run_id}", tmp_path / "rebuild-graph.png",
                   "Beginning flow run", height=1600)
    assert "Failed" not in page, page

    # The rebuild deployment's custom-run form: `build` has typed sub-fields, described.
    deployments = stack.deployments()
    page = _render(f"{ui}/deployments/deployment/{deployments['rebuild']['id']}/run",
                   tmp_path / "rebuild-form.png", "Chunk Tokens", height=2400)
    for field in ("Chunk Tokens", "Embed Model", "Contextual Text"):
        assert field in page, page
    assert "Token budget per chunk" in page and "empty = the worker's" in page, page

    # Undo it from the UI: the rollback deployment, confirmed, run by the worker.
    done = cli(stack, "deployment", "run", "rollback/rollback", "--param", "confirm=true",
               "--watch", "--watch-timeout", "180", timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    rolled = run_id_of(done.stdout)
    assert stack.state(rolled) == "Completed"
    page = _render(f"{ui}/runs/flow-run/{rolled}", tmp_path / "rollback-run-log.png",
                   "serves its original build again", height=1200)
    assert "rollback: collection kbsync serves its original build again" in page, page
    assert "Traceback" not in page, page
