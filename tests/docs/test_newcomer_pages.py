"""What the README and OPERATIONS §1 tell a newcomer (issue 41): how to run a sync nightly, that
the home follows the working folder, the store's detail kept in docs/store.md, and the Prefect UI
on another port (Prefect's own behaviour, checked against Prefect's settings)."""

from __future__ import annotations

import re

from test_front_door import README, ROOT

OPERATIONS = ROOT / "docs" / "OPERATIONS.md"


def _section(text: str, heading: str) -> str:
    return text.split(heading, 1)[1].split("\n## ", 1)[0]


def test_the_readme_says_how_to_run_nightly_and_points_to_operations():
    nightly = _section(README.read_text(encoding="utf-8"), "## Run it nightly")
    assert "nightly-sync" in nightly and "(docs/OPERATIONS.md)" in nightly
    assert "deployments/serve.py" in nightly


def test_the_store_detail_lives_in_docs_not_in_the_readme():
    readme = README.read_text(encoding="utf-8")
    assert "## The embedded store" not in readme and "int8-quantized" not in readme
    store = (ROOT / "docs" / "store.md").read_text(encoding="utf-8")
    assert "## In short" in store and "rescored on the originals" in store


def test_the_home_is_said_to_follow_the_working_folder():
    readme = README.read_text(encoding="utf-8")
    assert re.search(r"`\./\.kbsync/qdrant` \(relative to the working folder", readme)
    assert "| `KBSYNC_HOME` | `.kbsync` (in the working folder) |" in readme


def test_operations_says_the_ui_calls_4200_until_ui_api_url_is_set(monkeypatch):
    server = _section(OPERATIONS.read_text(encoding="utf-8"), "## 1. Start the server")
    assert "PREFECT_UI_API_URL" in server and "Prefect's behaviour" in server
    from prefect.settings import Settings

    for name in ("PREFECT_API_URL", "PREFECT_UI_API_URL", "PREFECT_SERVER_UI_API_URL",
                 "PREFECT_SERVER_API_PORT", "PREFECT_SERVER_API_HOST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PREFECT_PROFILES_PATH", str(ROOT / "no-such-profiles.toml"))
    assert Settings().server.ui.api_url == "http://127.0.0.1:4200/api"
    monkeypatch.setenv("PREFECT_UI_API_URL", "http://127.0.0.1:4300/api")
    assert Settings().server.ui.api_url == "http://127.0.0.1:4300/api"
