"""A typo in a KBSYNC_* name is warned about, once, with the name it meant (issue 22).

Before, ``KBSYNC_COLECTION`` and ``KBSYNC_EMBED_PROVDER`` were silently ignored and the
run went on with the defaults they were meant to change. The variables kbsync reads
outside Settings (deployment scripts, the test suite) must never be warned about.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kbsync.settings import OTHER_VARIABLES, known_variables, unknown_variables

KBSYNC = str(Path(sys.executable).with_name("kbsync"))


def _stats(tmp_path, **extra) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("KBSYNC_")}
    env.update(KBSYNC_HOME=str(tmp_path / "home"), KBSYNC_EMBED_PROVIDER="hash", **extra)
    return subprocess.run([KBSYNC, "stats", "--json"], env=env, capture_output=True, text=True,
                          timeout=120)


def test_a_misspelt_variable_is_warned_with_the_name_it_meant(tmp_path):
    done = _stats(tmp_path, KBSYNC_COLECTION="mine", KBSYNC_EMBED_PROVDER="openai")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    collection = [line for line in lines if "KBSYNC_COLECTION" in line]
    provider = [line for line in lines if "KBSYNC_EMBED_PROVDER" in line]
    assert len(collection) == 1 and "did you mean KBSYNC_COLLECTION?" in collection[0]
    assert len(provider) == 1 and "did you mean KBSYNC_EMBED_PROVIDER?" in provider[0]
    assert "mine" not in done.stderr  # the value is not repeated (it could be a secret)


def test_known_variables_and_the_allow_list_are_not_warned(tmp_path):
    # KBSYNC_SERVER would send the command to a server (issue 40): known, but not inert
    others = {name: "x" for name in OTHER_VARIABLES if name != "KBSYNC_SERVER"}
    done = _stats(tmp_path, KBSYNC_COLLECTION="kb", kbsync_chunk_tokens="200",
                  KBSYNC_QUERY_TIMEOUT_S="5", **others)
    assert done.returncode == 0, done.stderr
    assert "unknown variable" not in done.stderr


def test_every_variable_the_code_reads_is_known():
    """Any ``KBSYNC_NAME`` spelled in kbsync/, tasks/, flows/ or deployments/ is a setting
    or on the allow-list, so a variable kbsync itself reads is never called a typo."""
    import re

    root = Path(__file__).resolve().parents[1]
    spelled: set[str] = set()
    constants: set[str] = set()  # Python names that merely look like one (KBSYNC_PARTS)
    for folder in ("kbsync", "tasks", "flows", "deployments"):
        for path in (root / folder).rglob("*"):
            if path.suffix in (".py", ".yml", ".yaml", ".sh") and path.is_file():
                text = path.read_text(errors="replace")
                spelled |= set(re.findall(r"\bKBSYNC_[A-Z0-9_]*[A-Z0-9]\b", text))
                constants |= set(re.findall(r"^(KBSYNC_[A-Z0-9_]+)\s*[:=]", text, re.MULTILINE))
    assert not sorted(spelled - constants - known_variables() - {"KBSYNC_X"})


def test_no_suggestion_for_a_name_far_from_any():
    assert unknown_variables({"KBSYNC_ZZZZZZZZ": "1", "PATH": "/bin"}) == [("KBSYNC_ZZZZZZZZ", None)]
