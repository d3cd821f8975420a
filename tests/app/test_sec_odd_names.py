"""Issue 37, read-only and odd input: names that must not pass for others.

- ``kbsync remove --root <typo>`` exited 0 ("nothing to remove"): it is a usage error
  (exit 2) naming the unknown root and listing the namespace's roots.
- Root names ``..`` or holding a newline were accepted: one line, exit 2.
- ``kbsync.api`` doc_ids that pass for a root's file (``A/...``, ``./a/...``, fullwidth
  ``ａ/...``, ``..`` parts) were accepted, and a 300,000-character doc_id was stored.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from kbtest import KBSYNC, hash_env, write_tree
from kbsync import api
from kbsync.errors import RootConflict, UsageError
from kbsync.ingest.discover import parse_root
from kbsync.ingest.runner import run_plain
from kbsync.runtime import Runtime

OUTER = ("KBSYNC_", "PREFECT_API_URL")


def _kbsync(env, *args: str) -> tuple[int, dict | None, str]:
    proc = subprocess.run([KBSYNC, *args], env=env, capture_output=True, text=True, timeout=300)
    data = json.loads(proc.stdout) if "--json" in args and proc.stdout.strip() else None
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, data, proc.stderr.strip()


@pytest.fixture
def two_roots(settings, tmp_path):
    """Roots ``alpha`` (namespace default) and ``beta`` (namespace team), ingested."""
    alpha, beta = tmp_path / "alpha", tmp_path / "beta"
    write_tree(alpha, {"a.md": "# A\n\nAlpha note."})
    write_tree(beta, {"b.md": "# B\n\nBravo note."})
    runtime = Runtime.open(settings)
    try:
        run_plain([parse_root(str(alpha))], runtime=runtime)
        run_plain([parse_root(str(beta))], runtime=runtime, namespace="team")
    finally:
        runtime.close()
    return alpha, beta


# -- remove --root <typo> -------------------------------------------------------------------------
def test_remove_of_an_unknown_root_is_a_usage_error(settings, two_roots):
    env = hash_env(None, settings.home, drop=OUTER)
    code, data, err = _kbsync(env, "remove", "--root", "alpah", "--yes", "--json")
    assert code == 2 and data["error"]["kind"] == "UsageError"
    assert len(err.splitlines()) == 1
    assert "unknown root 'alpah' in namespace 'default'" in err and "'alpha'" in err
    assert "nothing was removed" in err


@pytest.mark.slow  # three CLI runs
def test_remove_names_the_namespace_an_unknown_root_is_bound_in(settings, two_roots):
    env = hash_env(None, settings.home, drop=OUTER)
    code, _, err = _kbsync(env, "remove", "--root", "beta", "--yes")
    assert code == 2 and "--namespace-of-root team" in err
    # the real one still goes
    code, data, _ = _kbsync(env, "remove", "--root", "beta", "--namespace-of-root", "team",
                            "--yes", "--json")
    assert code == 0 and data["documents"] == 1


def test_remove_of_a_root_on_a_missing_store_is_a_usage_error(settings):
    code, _, err = _kbsync(hash_env(None, settings.home, drop=OUTER),
                           "remove", "--root", "docs", "--yes")
    assert code == 2 and "unknown root 'docs'" in err and "has no roots" in err
    assert not (settings.home / "qdrant").exists() or not any((settings.home / "qdrant").iterdir())


# -- root names ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["..", ".", "a\nb", "tab\there", "bell\x07", "sep\u2028x"])
def test_odd_root_names_are_refused(tmp_path, name):
    share = tmp_path / "share"
    share.mkdir()
    with pytest.raises(UsageError) as err:
        parse_root(f"{name}={share}")
    assert "\n" not in str(err.value) and "NAME=PATH" in str(err.value)


def test_a_folder_named_with_a_newline_needs_a_name(tmp_path):
    share = tmp_path / "two\nlines"
    share.mkdir()
    with pytest.raises(UsageError, match="named after its folder") as err:
        parse_root(str(share))
    assert "\n" not in str(err.value)
    assert parse_root(f"docs={share}").name == "docs"


def test_the_cli_refuses_a_dotdot_root_in_one_line(settings, tmp_path):
    share = tmp_path / "share"
    write_tree(share, {"a.md": "# A\n\nAlpha."})
    env = hash_env(None, settings.home, drop=OUTER)
    code, data, err = _kbsync(env, "ingest", f"..={share}", "--json")
    assert code == 2 and data["error"]["kind"] == "UsageError"
    assert len(err.splitlines()) == 1 and "root name '..'" in err
    code, _, err = _kbsync(env, "remove", "--root", "..", "--yes")
    assert code == 2 and len(err.splitlines()) == 1 and "'..'" in err


# -- API doc_ids --------------------------------------------------------------------------------
@pytest.mark.parametrize("doc_id", ["./alpha/a.md", "alpha/../alpha/a.md", "alpha//a.md",
                                    "/alpha/a.md", "alpha/a.md/", "ａｌｐｈａ/a.md",
                                    "alpha\\a.md", "alpha/a\n.md", "x" * 300_000])
def test_doc_ids_that_are_not_plain_names_are_refused(settings, doc_id):
    with pytest.raises(UsageError) as err:
        api.add_text("# Spoof\n\nNot the file.", doc_id, settings=settings)
    message = str(err.value)
    assert "\n" not in message and len(message) < 300 and message.startswith("doc_id ")


def test_case_variants_of_a_root_name_are_the_roots(settings, two_roots):
    with api.KnowledgeBase(settings) as kb:
        for doc_id in ("ALPHA/a.md", "Alpha/new.md"):
            with pytest.raises(RootConflict, match="belongs to root alpha"):
                kb.add_text("# Spoof\n\nNot the file.", doc_id)
        assert kb.add_text("# Mine\n\nMy note.", "notes/alpha.md").status == "added"
        assert kb.add_text("# Long\n\nA long id.", "n/" + "x" * 1000).status == "added"
        hits = kb.search("Alpha note", k=5).results
        assert [h.doc_id for h in hits if h.doc_id.lower().startswith("alpha/")] == ["alpha/a.md"]


def test_a_root_named_like_stored_texts_in_another_case_is_refused(settings, tmp_path):
    notes = tmp_path / "Notes"
    write_tree(notes, {"mine.md": "# Mine\n\nThe share's file."})
    with api.KnowledgeBase(settings) as kb:
        kb.add_text("# Mine\n\nA text of my own.", "notes/mine.md")
        with pytest.raises(RootConflict, match="kbsync.api"):
            run_plain([parse_root(str(notes))], runtime=kb._open(embed=True))
