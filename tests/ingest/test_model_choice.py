"""A new collection's embedding model follows its shares' language, chosen once (issue 13).

Unit tests of the sampler and of :func:`choose_model` on real text (the Chinese and
English documents of ``data/sample``); the end-to-end run of the real command is
``tests/flows/test_model_choice_cli.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kbsync.catalog.active import resolve
from kbsync.ingest.model_choice import CJK_SHARE, MULTILINGUAL_MODEL, choose_model
from kbsync.models import RootSpec
from kbsync.settings import DEFAULT_LOCAL_MODEL, Settings
from kbsync.store import active as pointer
from kbsync.convert.safe_read import open_within
from kbsync.text.language import sample_language
from kbtest import SAMPLE, write_tree
from tests.ingest.sec_helpers import needs_capsh, without_dac

ZH_FAQ = (SAMPLE / "zh" / "faq.md").read_text(encoding="utf-8")
ZH_RUNBOOK = (SAMPLE / "zh" / "ops-runbook.txt").read_bytes()  # GB18030, as shipped
EN_DOC = (SAMPLE / "handbook" / "onboarding.md").read_text(encoding="utf-8")


def _zh_share(root: Path) -> Path:
    write_tree(root, {"faq.md": ZH_FAQ,
                      "page.html": f"<html><head><style>p {{}}</style></head><body><p>"
                                   f"{ZH_FAQ[:400]}</p></body></html>"})
    (root / "runbook.txt").write_bytes(ZH_RUNBOOK)
    return root


def _sample(roots, **options):
    """The sample as the run takes it: files opened with the run's own safe open."""
    return sample_language(roots, open_file=open_within, **options)


@pytest.fixture
def make_settings(tmp_path, monkeypatch):
    """Settings of a store under tmp_path with no KBSYNC_* variable but ``values``."""
    for key in list(os.environ):
        if key.startswith("KBSYNC_"):
            monkeypatch.delenv(key)

    def make(**values) -> Settings:
        return Settings(home=tmp_path / "home", **values)
    return make


def test_the_sample_counts_cjk_characters_against_latin_words(tmp_path):
    zh = _sample([_zh_share(tmp_path / "zh")])
    write_tree(tmp_path / "en", {"a.md": EN_DOC, "b.bin": "\x00" * 10})
    en = _sample([tmp_path / "en"])
    assert zh.files == 3 and zh.cjk_share > 0.8
    assert en.files == 1 and en.cjk_chars == 0 and en.latin_words > 50
    assert _sample([tmp_path / "missing"]).cjk_share == 0.0  # nothing read
    mixed = _sample([SAMPLE])  # the README's share: Chinese is a minority
    assert 0 < mixed.cjk_share < CJK_SHARE


def test_a_new_chinese_collection_records_the_multilingual_model_once(tmp_path, make_settings):
    settings = make_settings()
    roots = [RootSpec(name="zh", path=_zh_share(tmp_path / "zh"))]

    planned = choose_model(settings, roots, dry_run=True)
    assert planned.embed_model == MULTILINGUAL_MODEL
    assert pointer.read_pointer(settings.home, "kbsync") is None  # a dry run writes nothing

    chosen = choose_model(settings, roots)
    assert (chosen.embed_model_name(), chosen.collection, chosen.active_of) == (
        MULTILINGUAL_MODEL, "kbsync", "kbsync")
    # Every later command resolves to it with nothing configured, before opening the store.
    assert resolve(settings).embed_model_name() == MULTILINGUAL_MODEL
    # Not chosen again: the flow resolves first, and a recorded pointer ends the choice.
    assert choose_model(resolve(settings), roots) == resolve(settings)
    assert choose_model(settings, roots) is settings


@pytest.mark.parametrize("values", [{"embed_model": DEFAULT_LOCAL_MODEL},
                                    {"embed_provider": "hash"},
                                    {"qdrant_url": "http://127.0.0.1:6333"}])
def test_a_configured_model_provider_or_server_is_left_alone(tmp_path, make_settings, values):
    settings = make_settings(**values)
    roots = [RootSpec(name="zh", path=_zh_share(tmp_path / "zh"))]
    assert choose_model(settings, roots) is settings
    assert pointer.read_pointer(settings.home, "kbsync") is None


def test_english_shares_and_existing_collections_keep_the_default(tmp_path, make_settings):
    settings = make_settings()
    write_tree(tmp_path / "en", {"a.md": EN_DOC})
    assert choose_model(settings, [RootSpec(name="en", path=tmp_path / "en")]) is settings
    # A collection that exists (its engine config is there) is never re-chosen.
    from kbsync.store.edge.query import CONFIG_FILE

    (settings.store_path / "kbsync").mkdir(parents=True)
    (settings.store_path / "kbsync" / CONFIG_FILE).write_text("{}")
    zh = [RootSpec(name="zh", path=_zh_share(tmp_path / "zh"))]
    assert choose_model(settings, zh) is settings


def test_a_rebuild_keeps_the_chosen_model_unless_it_names_one(tmp_path, make_settings):
    from kbsync.ingest.model_choice import rebuild_model

    settings = make_settings()
    choose_model(settings, [RootSpec(name="zh", path=_zh_share(tmp_path / "zh"))])
    record = pointer.read_pointer(settings.home, "kbsync")
    assert rebuild_model(settings, record, {}).embed_model == MULTILINGUAL_MODEL
    named = make_settings(embed_model=DEFAULT_LOCAL_MODEL)
    assert rebuild_model(named, record, {}) is named  # the environment names one
    assert rebuild_model(settings, record, {"embed_model": "x"}) is settings  # the build does
    swapped = pointer.ActiveRecord("kbsync", "kbsync__r1", "kbsync", dict(record.build))
    assert rebuild_model(settings, swapped, {}) is settings  # a rebuild's record: as before
    assert rebuild_model(settings, None, {}) is settings


def _zh_pdf(path: Path, lines: list[str]) -> Path:
    import pymupdf

    doc = pymupdf.open()
    for start in range(0, len(lines), 30):
        page = doc.new_page()
        page.insert_text((50, 60), lines[start:start + 30], fontsize=10, fontname="china-s")
    doc.save(path)
    return path


def _zh_lines() -> list[str]:
    return [line.strip() for line in ZH_FAQ.splitlines() if line.strip()][:60]


@pytest.mark.parametrize("isolated", [True, False])
def test_a_share_of_only_chinese_pdfs_is_sampled_from_converted_text(tmp_path, make_settings,
                                                                     isolated):
    """Issue 24: a share with no text file to read raw used to keep the English default."""
    share = tmp_path / "pdfs"
    share.mkdir()
    for n in range(3):
        _zh_pdf(share / f"手册-{n}.pdf", _zh_lines())
    (share / "broken.pdf").write_bytes(b"%PDF-1.7\n not a pdf at all")  # left out of the sample
    settings = make_settings(convert_isolation=isolated)
    roots = [RootSpec(name="pdfs", path=share)]
    planned = choose_model(settings, roots, dry_run=True)
    assert planned.embed_model == MULTILINGUAL_MODEL


def test_office_and_pdf_english_shares_keep_the_default(tmp_path, make_settings):
    share = tmp_path / "office"
    share.mkdir()
    for name in ("policies/security-policy.pdf", "incidents/2024-03-12-ingestion-outage.docx",
                 "product/roadmap-2024.pptx"):
        (share / Path(name).name).write_bytes((SAMPLE / name).read_bytes())
    settings = make_settings()
    assert choose_model(settings, [RootSpec(name="office", path=share)]) is settings


def test_each_kind_of_file_weighs_by_its_count_in_the_share(tmp_path):
    """Six Chinese PDFs beside two English READMEs: mostly Chinese, though the raw text
    sample alone reads 0% CJK."""
    from kbsync.convert import convert

    share = tmp_path / "mixed"
    write_tree(share, {"README.md": EN_DOC, "docs/NOTES.md": EN_DOC})
    for n in range(6):
        _zh_pdf(share / f"zh-{n}.pdf", _zh_lines())
    raw_only = _sample([share])
    assert raw_only.cjk_share == 0.0 and raw_only.converted == 0
    sample = _sample([share], other_suffixes=frozenset({".pdf"}), other_files=2,
                     read_other=lambda p: convert(p, doc_id="x").markdown)
    assert (sample.files, sample.converted) == (4, 2)
    assert 0.6 < sample.cjk_share < 0.8  # 6/8 of the files, almost all CJK


def test_a_link_out_of_the_share_is_not_sampled(tmp_path, make_settings):
    """The sample reads what the run may read: a PDF reached by a link leading out of the
    root is refused (SymlinkOutsideRoot), not converted."""
    outside = tmp_path / "outside"
    outside.mkdir()
    share = tmp_path / "share"
    write_tree(share, {"README.md": EN_DOC})
    for n in range(3):
        (share / f"zh-{n}.pdf").symlink_to(_zh_pdf(outside / f"zh-{n}.pdf", _zh_lines()))
    settings = make_settings(convert_isolation=False)
    assert choose_model(settings, [RootSpec(name="share", path=share)], dry_run=True) is settings


def test_raw_heads_are_read_only_inside_the_share_and_a_fifo_does_not_block(tmp_path):
    """The raw head reads obey the run's read rules: a text file reached by a link leading
    out of the root is not read, a link that stays inside is, and a FIFO named like a text
    file is skipped at once (a plain open waited for a writer: the ingest hung)."""
    outside = tmp_path / "outside"
    _zh_share(outside)
    share = tmp_path / "share"
    write_tree(share, {"README.md": EN_DOC, "docs/guide.md": EN_DOC})
    for name in ("faq.md", "runbook.txt", "page.html"):
        (share / f"out-{name}").symlink_to(outside / name)
    (share / "inside.md").symlink_to(share / "docs" / "guide.md")
    os.mkfifo(share / "pipe.md")
    sample = _sample([share])
    assert sample.files == 3  # README, docs/guide and the link inside; no link out, no FIFO
    assert sample.cjk_chars == 0 and sample.cjk_share == 0.0
    assert _sample([outside]).cjk_share > 0.5  # the same files, read in their root


_SAMPLE_CHILD = ("import json, sys; from pathlib import Path; "
                 "from kbsync.convert.safe_read import open_within; "
                 "from kbsync.text.language import sample_language; "
                 "s = sample_language([Path(sys.argv[1])], open_file=open_within); "
                 "print(json.dumps([s.files, s.cjk_chars]))")


@needs_capsh
def test_unreadable_files_and_folders_are_left_out_of_the_sample(tmp_path):
    """As a plain user (root without DAC override): a Chinese file and a folder the user
    cannot read are skipped, not an error; the sample counts what it could read."""
    share = tmp_path / "share"
    _zh_share(share / "locked")
    write_tree(share, {"README.md": EN_DOC, "zh-secret.md": ZH_FAQ})
    (share / "zh-secret.md").chmod(0)
    (share / "locked").chmod(0)
    try:
        argv = [sys.executable, "-c", _SAMPLE_CHILD, str(share)]
        proc = subprocess.run(without_dac(argv), capture_output=True, text=True, timeout=120)
    finally:
        (share / "locked").chmod(0o755)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [1, 0]  # README only
    assert _sample([share]).cjk_chars > 0  # root reads them: the check is real
