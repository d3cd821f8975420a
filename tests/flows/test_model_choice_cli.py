"""A Chinese share on every default is built and searched with the multilingual model
(issue 13; :mod:`kbsync.ingest.model_choice`), through the real ``kbsync`` command and the
ingest flow on the session's Prefect test server: nothing is configured, and stats, search
and a second ingest keep the model the first one chose."""

from __future__ import annotations

import pytest

from kbsync.ingest.model_choice import MULTILINGUAL_MODEL
from kbtest import cli_env, run_kbsync
from tests.ingest.test_model_choice import _zh_share


@pytest.mark.slow
def test_a_chinese_share_is_built_and_searched_with_the_multilingual_model(prefect_api,
                                                                             tmp_path):
    """Every default (local provider, no model named): ingest, stats, search, re-run."""
    share = _zh_share(tmp_path / "zh")
    env = cli_env(prefect_api, tmp_path / "home", KBSYNC_CONVERT_ISOLATION="false")
    code, first, err = run_kbsync(env, "ingest", str(share), "--json")
    assert code == 0, err
    assert (first["added"], first["failed"]) == (3, 0)
    assert "multilingual-e5-small" in err  # the one line saying why

    code, stats, err = run_kbsync(env, "stats", "--json")
    assert code == 0, err
    assert stats["embedding"]["model"] == MULTILINGUAL_MODEL, stats

    code, found, err = run_kbsync(env, "search", "忘记密码怎么办", "--json", "-k", "3")
    assert code == 0, err  # no EmbedderMismatch: the query side resolves to the same model
    assert found["results"][0]["doc_id"] in {"zh/faq.md", "zh/page.html"}, found

    code, again, err = run_kbsync(env, "ingest", str(share), "--json")
    assert code == 0, err
    assert (again["unchanged"], again["added"], again["updated"]) == (3, 0, 0)
