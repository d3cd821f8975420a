"""kbsync.settings: defaults, ``KBSYNC_*`` parsing, one-line validation errors, masked secrets.

Every test starts from an environment without any ``KBSYNC_*`` variable, in an empty
working directory (the default home is relative to it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kbsync.errors import UsageError
from kbsync.settings import (DEFAULT_LOCAL_MODEL, EmbedProvider, Settings, SettingsInvalid,
                             load_settings)

SECRET = "sk-test-0123456789abcdef"
SECRET_VARS = ("KBSYNC_QDRANT_API_KEY", "KBSYNC_EMBED_API_KEY", "KBSYNC_LLM_API_KEY")


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A clean ``KBSYNC_*`` environment; returns a setter ``env(NAME=value, ...)``."""
    for key in list(os.environ):
        if key.upper().startswith("KBSYNC_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)

    def set_vars(**values: str) -> None:
        for name, value in values.items():
            monkeypatch.setenv(f"KBSYNC_{name}", value)
    return set_vars


# -- defaults ------------------------------------------------------------------------------------
DEFAULTS = {
    "home": ".kbsync", "qdrant_url": None, "qdrant_api_key": None, "collection": "kbsync",
    "embed_provider": "local", "embed_model": None, "embed_base_url": None,
    "embed_api_key": None, "embed_dimensions": None, "embed_batch_size": 64,
    "embed_timeout_s": 60.0, "embed_max_attempts": 5, "cache_size_gb": 4.0,
    "llm_base_url": None, "llm_model": None, "llm_api_key": None, "llm_timeout_s": 30.0,
    "llm_max_attempts": 2, "chunk_tokens": None, "chunk_overlap": None, "chunk_fit": False,
    "files_per_batch": 32,
    "task_runner": "threads", "task_workers": 3, "dask_address": None, "lock_timeout_s": 0.0,
    "convert_isolation": True, "convert_workers": 2, "convert_timeout_s": 120.0,
    "convert_memory_mb": 2048, "max_file_mb": 100.0, "min_free_mb": 64.0,
    "orchestrator_timeout_s": 60.0, "contextual_text": True,
}
"""The documented defaults (docs/reference/configuration.md): changing one is a visible decision."""


def test_defaults_without_any_variable(env):
    data = Settings().public_dict()
    assert {key: data[key] for key in DEFAULTS} == DEFAULTS


def test_derived_paths_and_names_follow_home_and_collection(env):
    env(HOME="/srv/kb", COLLECTION="docs")
    settings = Settings()
    assert settings.store_path == Path("/srv/kb/qdrant")
    assert settings.cache_path == Path("/srv/kb/cache")
    assert settings.state_collection == "docs_state"


@pytest.mark.parametrize("variables, expected", [
    ({}, DEFAULT_LOCAL_MODEL),
    ({"EMBED_PROVIDER": "hash"}, "hash-384"),
    ({"EMBED_PROVIDER": "hash", "EMBED_DIMENSIONS": "64"}, "hash-64"),
    ({"EMBED_PROVIDER": "openai"}, "text-embedding-3-small"),
    ({"EMBED_PROVIDER": "openai", "EMBED_MODEL": "bge-m3"}, "bge-m3"),
    ({"EMBED_MODEL": "paraphrase-multilingual-MiniLM-L12-v2"},
     "paraphrase-multilingual-MiniLM-L12-v2"),
])
def test_embed_model_name_fills_in_the_providers_default(env, variables, expected):
    env(**variables)
    assert Settings().embed_model_name() == expected


# -- parsing -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, value, field, expected", [
    ("HOME", "/var/lib/kbsync", "home", Path("/var/lib/kbsync")),
    ("QDRANT_URL", "http://qdrant:6333", "qdrant_url", "http://qdrant:6333"),
    ("EMBED_PROVIDER", "openai", "embed_provider", EmbedProvider.OPENAI),
    ("EMBED_DIMENSIONS", "256", "embed_dimensions", 256),
    ("EMBED_TIMEOUT_S", "2.5", "embed_timeout_s", 2.5),
    ("CHUNK_TOKENS", "16", "chunk_tokens", 16),
    ("CHUNK_OVERLAP", "0", "chunk_overlap", 0),
    ("TASK_RUNNER", "dask", "task_runner", "dask"),
    ("CONVERT_ISOLATION", "false", "convert_isolation", False),
    ("CONVERT_ISOLATION", "0", "convert_isolation", False),
    ("CONVERT_ISOLATION", "yes", "convert_isolation", True),
    ("ORCHESTRATOR_TIMEOUT_S", "0", "orchestrator_timeout_s", 0.0),
])
def test_each_variable_sets_its_field(env, name, value, field, expected):
    env(**{name: value})
    assert getattr(Settings(), field) == expected


def test_variable_names_are_case_insensitive_and_unknown_ones_ignored(env, monkeypatch):
    monkeypatch.setenv("kbsync_collection", "lower")
    monkeypatch.setenv("KBSYNC_NO_SUCH_SETTING", "whatever")
    settings = Settings()
    assert settings.collection == "lower"
    assert not hasattr(settings, "no_such_setting")


def test_keyword_arguments_win_over_the_environment(env):
    env(COLLECTION="from-env", TASK_WORKERS="9")
    settings = Settings(collection="explicit")
    assert (settings.collection, settings.task_workers) == ("explicit", 9)


# -- validation ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name, value", [
    ("EMBED_BATCH_SIZE", "0"), ("EMBED_BATCH_SIZE", "2049"), ("EMBED_BATCH_SIZE", "many"),
    ("EMBED_DIMENSIONS", "0"), ("EMBED_TIMEOUT_S", "0"), ("CHUNK_TOKENS", "15"),
    ("CHUNK_OVERLAP", "-1"), ("TASK_RUNNER", "processes"), ("TASK_WORKERS", "257"),
    ("CONVERT_WORKERS", "65"), ("CONVERT_MEMORY_MB", "255"), ("CONVERT_ISOLATION", "maybe"),
    ("LOCK_TIMEOUT_S", "-1"), ("LLM_MAX_ATTEMPTS", "11"), ("EMBED_PROVIDER", "cohere"),
    ("MIN_FREE_MB", "-0.5"),
])
def test_out_of_range_values_are_refused(env, name, value):
    env(**{name: value})
    with pytest.raises(SettingsInvalid):
        Settings()
    with pytest.raises(UsageError) as raised:
        load_settings()
    message = str(raised.value)
    assert message.startswith(f"KBSYNC_{name}={value!r} is not valid: "), message


def _number_fields() -> dict[str, type]:
    """Every int or float field (optional ones included), by name."""
    found = {}
    for name, info in Settings.model_fields.items():
        kinds = set(getattr(info.annotation, "__args__", (info.annotation,))) - {type(None)}
        if kinds in ({int}, {float}):
            found[name] = kinds.pop()
    return found


def test_every_number_setting_has_an_upper_bound_and_refuses_overflow(env, monkeypatch):
    """``inf``, ``nan``, ``1e308`` and a 30-digit integer used to pass and end in an
    ``OverflowError`` deep in a run (issue 37): each is one line naming the variable."""
    fields = _number_fields()
    assert {"max_file_mb", "cache_size_gb", "min_free_mb", "convert_memory_mb",
            "embed_timeout_s"} <= set(fields), sorted(fields)
    for name, kind in fields.items():
        values = ("inf", "-inf", "nan", "1e308") if kind is float else ("9" * 30,)
        for value in values:
            monkeypatch.setenv(f"KBSYNC_{name.upper()}", value)
            with pytest.raises(UsageError) as raised:
                load_settings()
            message = str(raised.value)
            assert message.startswith(f"KBSYNC_{name.upper()}={value!r} is not valid: "), message
            assert "\n" not in message and ";" not in message
        monkeypatch.delenv(f"KBSYNC_{name.upper()}")


@pytest.mark.parametrize("name, value, reason", [
    ("MAX_FILE_MB", "inf", "input should be a finite number"),
    ("CACHE_SIZE_GB", "1e308", "input should be less than or equal to 1048576"),
    ("COLLECTION", "a b", "use 1-100 letters, digits, '_' or '-', starting with a letter or digit"),
    ("COLLECTION", "-kb", "use 1-100 letters"),
    ("COLLECTION", "kb.v2", "use 1-100 letters"),
    ("HOME", "", "it is empty; unset it for the default"),
    ("HOME", "   ", "it is empty; unset it for the default"),
])
def test_bad_sizes_names_and_homes_are_one_line_naming_the_variable(env, name, value, reason):
    env(**{name: value})
    with pytest.raises(UsageError) as raised:
        load_settings()
    assert str(raised.value).startswith(f"KBSYNC_{name}={value!r} is not valid: {reason}")


def test_a_collection_name_fits_the_store_with_kbsyncs_own_suffixes(env):
    """100 characters are accepted, and with the longest suffix kbsync adds (a rebuild's
    state collection) it is still a name the store accepts; 101 and 300 are refused, the
    value shown cut short (a 300-character name used to end in ``OSError``)."""
    from kbsync.store.validate import check_collection_name

    env(COLLECTION="k" * 100)
    settings = load_settings()
    check_collection_name(Settings.state_collection_of(f"{settings.collection}__r{'9' * 19}"))
    check_collection_name(f"{settings.collection}__previous")
    for length in (101, 300):
        env(COLLECTION="k" * length)
        with pytest.raises(UsageError) as raised:
            load_settings()
        message = str(raised.value)
        assert message == (f"KBSYNC_COLLECTION={'k' * 40!r}… is not valid: use 1-100 letters, "
                           f"digits, '_' or '-', starting with a letter or digit ({length} here)")


def test_an_empty_home_is_refused_but_a_named_one_is_kept(env):
    env(HOME="")
    with pytest.raises(UsageError, match="^KBSYNC_HOME='' is not valid: it is empty"):
        load_settings()
    env(HOME=".")  # named on purpose: the user's choice
    assert load_settings().home == Path(".")
    assert Settings(home=Path("")).home == Path(".")  # a Path from code is not a setting


def test_several_bad_variables_make_one_line_naming_each(env):
    env(EMBED_BATCH_SIZE="abc", TASK_RUNNER="processes", LOCK_TIMEOUT_S="-1")
    with pytest.raises(UsageError) as raised:
        load_settings()
    message = str(raised.value)
    assert "\n" not in message
    parts = message.split("; ")
    assert [p.split("=", 1)[0] for p in parts] == [
        "KBSYNC_EMBED_BATCH_SIZE", "KBSYNC_TASK_RUNNER", "KBSYNC_LOCK_TIMEOUT_S"]
    assert "integer" in parts[0] and "'threads'" in parts[1] and "greater than or equal to 0" \
        in parts[2]
    # Nothing of pydantic's own report: no class name, no documentation link.
    assert "ValidationError" not in message and "errors.pydantic.dev" not in message


def test_a_valid_environment_loads_through_the_cli_helper(env):
    env(EMBED_PROVIDER="hash", TASK_WORKERS="4")
    settings = load_settings()
    assert settings.embed_provider is EmbedProvider.HASH and settings.task_workers == 4


# -- secrets -------------------------------------------------------------------------------------
def test_secrets_are_masked_in_repr_str_dumps_and_public_dict(env):
    env(**{name.removeprefix("KBSYNC_"): SECRET for name in SECRET_VARS})
    settings = Settings()
    public = settings.public_dict()
    for shown in (repr(settings), str(settings), str(public), str(settings.model_dump(mode="json")),
                  str(settings.model_dump())):
        assert SECRET not in shown
    assert {public[k] for k in ("qdrant_api_key", "embed_api_key", "llm_api_key")} == {
        "**********"}
    # The value itself stays available to whoever opens the connection.
    assert settings.embed_api_key is not None
    assert settings.embed_api_key.get_secret_value() == SECRET


def test_unset_secrets_stay_none_in_public_dict(env):
    public = Settings().public_dict()
    assert public["qdrant_api_key"] is public["embed_api_key"] is public["llm_api_key"] is None
