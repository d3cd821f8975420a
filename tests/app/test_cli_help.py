"""What a newcomer meets on the command line (issue 41): help on every reader's
``--namespace``, "did you mean" for a misspelt option or command, a misspelt namespace
named with those that exist, and ``verify`` on an empty store saying nothing is indexed."""

from __future__ import annotations

import argparse
import json

import pytest

from kbsync.app import cli
from kbsync.ingest.discover import parse_root
from kbsync.ingest.runner import run_plain
from kbsync.runtime import Runtime
from kbtest import topic_share


def _options(command: str) -> dict[str, argparse.Action]:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {o: a for a in sub.choices[command]._actions for o in a.option_strings}


@pytest.mark.parametrize("command", ["search", "ask", "eval", "stats", "verify"])
def test_every_namespace_option_has_help(command):
    action = _options(command)["--namespace"]
    assert action.help and action.metavar == "NS"


def test_search_mode_points_to_retrieval_and_eval_defaults_to_hybrid():
    assert "docs/retrieval.md" in _options("search")["--mode"].help
    assert "README" not in _options("search")["--mode"].help
    modes = _options("eval")["--modes"]
    assert modes.default == "hybrid" == _options("search")["--mode"].default
    assert "default hybrid" in modes.help


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(("argv", "hint", "where"), [
    (["search", "keys", "--namespce", "team"], "did you mean --namespace?", "kbsync search"),
    (["ingest", ".", "--dryrun"], "did you mean --dry-run?", "kbsync ingest"),
    (["stats", "--jsn"], "did you mean --json?", "kbsync stats"),
    (["serch", "keys"], "did you mean search", "kbsync"),
])
def test_a_misspelt_option_or_command_gets_did_you_mean(capsys, argv, hint, where):
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and hint in err and f"(see `{where} --help`)" in err


def test_an_unknown_option_with_no_close_match_gets_no_guess(capsys):
    code, out, err = _run(capsys, "search", "keys", "--zzz", "--json")
    assert code == 2 and "did you mean" not in err and "unrecognized arguments: --zzz" in err
    assert json.loads(out)["error"]["kind"] == "UsageError"


@pytest.fixture
def team_kb(settings, tmp_path):
    runtime = Runtime.open(settings)
    try:
        run_plain([parse_root(f"share={topic_share(tmp_path / 'share', 3)}")], runtime=runtime,
                  namespace="team")
    finally:
        runtime.close()
    return settings


@pytest.mark.parametrize("command", [["search", "volcano"], ["ask", "volcano?"], ["stats"]])
def test_a_misspelt_namespace_names_those_that_exist(capsys, monkeypatch, team_kb, command):
    monkeypatch.setenv("KBSYNC_LLM_MODEL", "fake-chat")  # ask's chat model is never called
    monkeypatch.setenv("KBSYNC_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("KBSYNC_LLM_API_KEY", "k")
    code, out, err = _run(capsys, *command, "--namespace", "teem", "--json")
    assert code == 2 and err.count("\n") == 1, err
    assert "namespace 'teem' holds nothing" in err and "its namespaces: team" in err
    assert "kbsync ingest" not in err
    assert json.loads(out)["error"]["kind"] == "UsageError"
    code, out, err = _run(capsys, "stats", "--namespace", "team", "--json")
    assert code == 0 and json.loads(out)["namespaces"]["team"]["documents"] == 3


def test_verify_on_an_empty_store_says_nothing_is_indexed(capsys, settings):
    code, out, err = _run(capsys, "verify")
    assert code == 0, err
    assert "nothing is indexed yet" in out and "no drift" not in out
    assert "relative to the working folder" not in out  # the test's home is absolute
    assert not settings.home.exists()
