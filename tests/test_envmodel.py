"""kbsync.envmodel reads values as pydantic's lax mode did, and keeps the model API the code uses.

The settings left pydantic-settings for speed (issue 42), not to change what a value means:
pydantic (installed with Prefect) is the oracle for every scalar kind the settings use.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Literal

import pydantic
import pytest
from pydantic import ConfigDict, TypeAdapter

from kbsync.envmodel import EnvModel, Field, SecretStr, SettingsInvalid, _parse
from kbsync.settings import Settings

INPUTS = ["5", " 5 ", "+5", "-3", "5.0", "5.", "5.5", "1e3", "abc", "", "1_000", "1__0", "_1",
          "true", "YES", "off", "2", "inf", "-inf", "nan", "-0.5", "0x10", "٣", " true ",
          "1 000", "9" * 30, 5, 5.0, 5.5, 0, 1, True, False]


@pytest.mark.parametrize("kind", [int, float, bool, str, Literal["a", "b"]],
                         ids=["int", "float", "bool", "str", "literal"])
def test_each_kind_accepts_and_refuses_what_pydantic_did(kind):
    oracle = TypeAdapter(kind, config=ConfigDict(allow_inf_nan=False))
    differ = []
    for raw in INPUTS:
        try:
            expected: tuple = ("ok", oracle.validate_python(raw))
        except pydantic.ValidationError:
            expected = ("refused",)
        try:
            got: tuple = ("ok", _parse(kind, raw))
        except ValueError:
            got = ("refused",)
        if got != expected or type(got[-1]) is not type(expected[-1]):
            differ.append((raw, expected, got))
    assert not differ


class _Sample(EnvModel):
    env_prefix = "SAMPLE_"

    count: int = Field(3, ge=1, le=10, description="A count.")
    path: Path | None = Field(None, description="A path.")
    key: SecretStr | None = Field(None, description="A key.")


def test_keywords_win_over_the_environment_and_both_are_fields_set(monkeypatch):
    monkeypatch.setenv("sample_COUNT", "7")
    monkeypatch.setenv("SAMPLE_PATH", "/srv")
    sample = _Sample(path="/elsewhere")
    assert (sample.count, sample.path, sample.key) == (7, Path("/elsewhere"), None)
    assert sample.model_fields_set == {"count", "path"}


def test_every_error_of_a_construction_is_reported_at_once(monkeypatch):
    monkeypatch.setenv("SAMPLE_COUNT", "11")
    with pytest.raises(SettingsInvalid) as raised:
        _Sample(path=3)
    assert [(e["loc"], e["input"]) for e in raised.value.errors()] == [
        (("count",), "11"), (("path",), 3)]
    assert "less than or equal to 10" in raised.value.errors()[0]["msg"]


def test_a_copy_applies_its_update_unvalidated_and_keeps_the_original(monkeypatch):
    sample = _Sample()
    copy = sample.model_copy(update={"count": 99})
    assert (sample.count, copy.count) == (3, 99)
    assert copy.model_fields_set == {"count"} and sample.model_fields_set == set()
    assert copy != sample and sample == sample.model_copy()


def test_secrets_stay_masked_in_dumps_and_survive_a_pickle(monkeypatch):
    monkeypatch.setenv("SAMPLE_KEY", "sk-123")
    sample = _Sample()
    assert "sk-123" not in repr(sample) + str(sample.model_dump(mode="json"))
    assert sample.model_dump(mode="json")["key"] == "**********"
    again = pickle.loads(pickle.dumps(sample))
    assert again == sample and again.key.get_secret_value() == "sk-123"


def test_settings_round_trip_through_their_python_dump():
    settings = Settings(collection="docs", embed_provider="hash", llm_api_key="k")
    assert Settings(**settings.model_dump()) == settings
    assert dict(settings)["collection"] == "docs"


def test_a_secret_given_as_pydantics_is_taken_as_ours():
    settings = Settings(embed_api_key=pydantic.SecretStr("sk-1"))
    assert settings.embed_api_key == SecretStr("sk-1")
