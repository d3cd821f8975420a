"""docs/reference/cli.md names every subcommand of the ``kbsync`` parser, and every option and
argument of each in that command's own section (``## `kbsync NAME` ``)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from kbsync.app.cli import build_parser

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "cli.md"


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _sections() -> dict[str, str]:
    """The text of each ``## `kbsync NAME` `` section, by NAME."""
    text = PAGE.read_text(encoding="utf-8")
    parts = re.split(r"^## `kbsync (\S+)`\s*$", text, flags=re.MULTILINE)
    return {parts[i]: parts[i + 1].split("\n## ")[0] for i in range(1, len(parts), 2)}


def _names(action: argparse.Action) -> list[str]:
    """What the page must show for an argument: its option strings, or a positional's name."""
    if action.option_strings:
        return [o for o in action.option_strings if o not in ("-h", "--help")]
    return [action.metavar or action.dest.upper()]


def test_every_subcommand_has_its_section() -> None:
    missing = sorted(set(_subcommands()) - set(_sections()))
    assert not missing, f"docs/reference/cli.md has no section for: {missing}"


def test_no_section_for_a_subcommand_that_is_gone() -> None:
    stale = sorted(set(_sections()) - set(_subcommands()))
    assert not stale, f"docs/reference/cli.md documents commands the parser lacks: {stale}"


@pytest.mark.parametrize("command", sorted(_subcommands()))
def test_every_option_appears_in_its_commands_section(command: str) -> None:
    section = _sections().get(command, "")
    missing = [name for action in _subcommands()[command]._actions
               for name in _names(action) if f"`{name}" not in section]
    assert not missing, f"`kbsync {command}` section of docs/reference/cli.md lacks {missing}"


def test_every_top_level_option_appears() -> None:
    text = PAGE.read_text(encoding="utf-8")
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        for name in action.option_strings:
            assert f"`{name}`" in text, name


def test_every_exit_code_of_the_cli_is_listed() -> None:
    from kbsync.app import cli_support

    text = PAGE.read_text(encoding="utf-8")
    for code in (cli_support.EXIT_OK, cli_support.EXIT_FAILED, cli_support.EXIT_USAGE,
                 cli_support.EXIT_PARTIAL, cli_support.EXIT_INTERRUPTED, 143, 129):
        assert f"`{code}`" in text, code
