"""docs/reference/configuration.md is written from the Settings fields by
``python -m kbsync.app.docgen``; these tests fail when it is not current."""

from __future__ import annotations

from kbsync.app import docgen
from kbsync.settings import OTHER_VARIABLES, Settings


def test_the_configuration_page_is_current() -> None:
    current = docgen.CONFIGURATION.read_text(encoding="utf-8")
    assert current == docgen.configuration_markdown(), (
        f"docs/reference/configuration.md is not current: run `{docgen.COMMAND}` and commit it")


def test_every_setting_has_its_row_with_its_default() -> None:
    text = docgen.configuration_markdown()
    for name, info in Settings.model_fields.items():
        row = f"| `{docgen.variable(name)}` | {docgen.render_default(info)} |"
        assert row in text, row


def test_every_setting_has_a_description() -> None:
    missing = [name for name, info in Settings.model_fields.items() if not info.description]
    assert not missing, f"Field(description=...) missing for {missing}"


def test_every_other_variable_is_described() -> None:
    assert set(OTHER_VARIABLES) <= set(docgen.OTHER_NOTES), (
        f"describe {sorted(set(OTHER_VARIABLES) - set(docgen.OTHER_NOTES))} in "
        "kbsync.app.docgen.OTHER_NOTES")


def test_no_note_outlives_its_setting() -> None:
    assert set(docgen.NOTES) <= set(Settings.model_fields)
    assert set(docgen.OTHER_NOTES) <= set(OTHER_VARIABLES)


def test_defaults_render_as_written_in_the_environment() -> None:
    fields = Settings.model_fields
    assert docgen.render_default(fields["embed_timeout_s"]) == "`60`"
    assert docgen.render_default(fields["qdrant_url"]) == "unset"
    assert docgen.render_default(fields["ocr"]) == "`false`"
    assert docgen.render_default(fields["embed_provider"]) == "`local`"
    assert docgen.render_allowed(fields["embed_batch_size"]) == "integer ≥ 1, ≤ 2048"
    assert docgen.render_allowed(fields["chunk_tokens"]) == "integer ≥ 16, ≤ 65536, or unset"


def test_check_mode_says_how_to_regenerate(capsys) -> None:
    assert docgen.main(["--check"]) == 0
    assert capsys.readouterr().err == ""
