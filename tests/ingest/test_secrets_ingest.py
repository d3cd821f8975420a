"""Issue 37: a file whose converted text holds a secret is not indexed, whatever its
extension and wherever the secret lies: it fails as SecretDetected, naming the kind and
line, and the secret is nowhere in the store, the JSON summary or the logs. With
KBSYNC_SECRETS=redact it is indexed with the secret replaced; a stored document whose file
gains a secret is withdrawn; add_text is screened too."""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import pytest
from kbtest import write_tree

from kbsync import api
from kbsync.errors import SecretDetected
from kbsync.ingest.context import IngestConfig
from kbsync.ingest.discover import parse_root
from kbsync.ingest.runner import run_plain
from kbsync.settings import Settings
from kbsync.text.secrets import SecretPolicy

B64 = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun"
RSA = f"-----BEGIN RSA PRIVATE KEY-----\n{B64}\n-----END RSA PRIVATE KEY-----\n"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzQ8Hj3mN2p"
KUBE_TOKEN = "kq3v9Zp1x7Lm2Nw8Rt4Yb6Hc0Dd5Fg"
PUTTY_PRIVATE = "AAAAIOz7Vt9QmV2xTb7LrN0cW8yHs3Jd6Fp1Ga5Ue2YkQmZ"
PROSE = "The zephyr release notes: what changed, and how to upgrade.\n"
SECRETS = (B64[:32], B64.lower()[:32], AWS_SECRET, KUBE_TOKEN, PUTTY_PRIVATE)

SHARE = {
    "README": "Zephyr\n======\n\nRead me first: zephyr setup steps.\n",
    "pgp": (f"-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBF{B64}\n=Xy12\n"
            "-----END PGP PRIVATE KEY BLOCK-----\n"),
    "long.txt": PROSE * 160 + RSA,  # the key after 9,000 bytes
    "guide.md": f"# Deploy\n\nUse this key:\n\n```\n{RSA}```\n",
    "mykey": (f"PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nPrivate-Lines: 1\n"
              f"{PUTTY_PRIVATE}\nPrivate-MAC: 8d2a0c3b1f\n"),
    "env": f"REGION=eu-west-1\nAWS_SECRET_ACCESS_KEY={AWS_SECRET}\n",
    "kubeconfig": (f"apiVersion: v1\nkind: Config\nusers:\n- name: admin\n  user:\n"
                   f"    token: {KUBE_TOKEN}\n"),
    "lower": RSA.lower(),
}
EXPECTED = {  # doc_id -> (kind, line) in the failure message
    "share/pgp": ("pgp-private-key", 1),
    "share/long.txt": ("pem-private-key", 161),
    "share/guide.md": ("pem-private-key", 6),
    "share/mykey": ("putty-private-key", 1),
    "share/env": ("secret-assignment", 2),
    "share/kubeconfig": ("secret-assignment", 6),
    "share/lower": ("pem-private-key", 1),
}


def _stored_texts(runtime) -> str:
    """Every payload of both collections, as one JSON string."""
    points = [*runtime.store.scroll(runtime.collection),
              *runtime.store.scroll(runtime.settings.state_collection)]
    return json.dumps([p.payload for p in points])


def _assert_nowhere(secrets, *places: str) -> None:
    for secret in secrets:
        for place in places:
            assert secret not in place


def test_each_secret_file_fails_as_secret_detected_and_leaks_nowhere(runtime, tmp_path, caplog):
    write_tree(tmp_path / "share", SHARE)
    caplog.set_level(logging.DEBUG)
    summary = run_plain([parse_root(str(tmp_path / "share"))], runtime=runtime).to_dict()
    assert (summary["added"], summary["failed"], summary["ignored"]) == (1, 7, 0), summary
    failures = {f["doc_id"]: f for f in summary["failures"]}
    assert set(failures) == set(EXPECTED)
    for doc_id, (kind, line) in EXPECTED.items():
        assert failures[doc_id]["error"] == "SecretDetected"
        assert f"{kind} at line {line}" in failures[doc_id]["message"], failures[doc_id]
        assert "removed" not in failures[doc_id]["message"]  # nothing was stored before
    stored = _stored_texts(runtime)
    assert "zephyr setup steps" in stored
    _assert_nowhere(SECRETS, stored, json.dumps(summary), caplog.text)
    again = run_plain([parse_root(str(tmp_path / "share"))], runtime=runtime).to_dict()
    assert (again["unchanged"], again["failed"]) == (1, 7)  # refused again, every run


def test_redact_indexes_the_text_with_the_secret_replaced(settings, tmp_path, caplog):
    from kbsync.runtime import Runtime

    write_tree(tmp_path / "share", {"env": SHARE["env"], "guide.md": SHARE["guide.md"]})
    runtime = Runtime.open(settings.model_copy(update={"secrets": "redact"}))
    caplog.set_level(logging.INFO)
    try:
        summary = run_plain([parse_root(str(tmp_path / "share"))], runtime=runtime).to_dict()
        stored = _stored_texts(runtime)
    finally:
        runtime.close()
    assert (summary["added"], summary["failed"]) == (2, 0), summary
    assert "REGION=eu-west-1" in stored and "AWS_SECRET_ACCESS_KEY=[REDACTED:secret-assignment]" in stored
    assert "[REDACTED:pem-private-key]" in stored and "Use this key" in stored
    assert "share/env" in caplog.text and "secret-assignment at line 2" in caplog.text
    assert "share/guide.md" in caplog.text and "pem-private-key at line 6" in caplog.text
    _assert_nowhere(SECRETS, stored, json.dumps(summary), caplog.text)


def test_a_stored_file_that_gains_a_secret_is_withdrawn(runtime, tmp_path):
    share = tmp_path / "share"
    write_tree(share, {"notes.txt": PROSE, "other.txt": "Another zephyr note.\n"})
    roots = [parse_root(str(share))]
    assert run_plain(roots, runtime=runtime).to_dict()["added"] == 2
    (share / "notes.txt").write_text(PROSE + f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}\n")
    summary = run_plain(roots, runtime=runtime).to_dict()
    assert (summary["failed"], summary["unchanged"]) == (1, 1), summary
    [failure] = summary["failures"]
    assert failure["error"] == "SecretDetected" and "indexed version is removed" in failure["message"]
    # no point or record of the document is left; only the failure is remembered
    # (kbsync.catalog.failed: the file is not converted again until it changes)
    points = [*runtime.store.scroll(runtime.collection),
              *runtime.store.scroll(runtime.settings.state_collection)]
    stored = json.dumps([p.payload for p in points if not p.payload.get("failed_doc_id")])
    assert "share/notes.txt" not in stored and "Another zephyr note" in stored
    assert runtime.states.get("default", "share/notes.txt") is None
    again = run_plain(roots, runtime=runtime).to_dict()
    assert (again["failed"], again["added"]) == (1, 0)
    assert "removed" not in again["failures"][0]["message"]


def test_a_secret_indexed_before_the_detector_is_withdrawn_on_the_next_run(
        runtime, tmp_path, monkeypatch):
    """A store older than the detector: the fingerprint names the detector's version, so
    the next run screens every stored document and withdraws the one with a key."""
    import kbsync.runtime
    import kbsync.text.secrets

    write_tree(tmp_path / "share", {"guide.md": SHARE["guide.md"], "notes.txt": PROSE})
    roots = [parse_root(str(tmp_path / "share"))]
    with monkeypatch.context() as old:
        old.setattr(kbsync.text.secrets, "DETECTORS", ())
        old.setattr(kbsync.runtime, "DETECTOR_VERSION", "0")
        assert run_plain(roots, runtime=runtime).to_dict()["added"] == 2
    assert B64[:32] in _stored_texts(runtime)  # what the old code left in the store
    summary = run_plain(roots, runtime=runtime).to_dict()
    assert (summary["failed"], summary["updated"]) == (1, 1), summary
    assert summary["failures"][0]["doc_id"] == "share/guide.md"
    assert B64[:32] not in _stored_texts(runtime)


@pytest.mark.slow  # starts a conversion worker (~8 s on 2 shared cores)
def test_the_isolated_converter_path_refuses_too(settings, tmp_path):
    """The default conversion (worker processes) goes through the same screen."""
    from kbsync.runtime import Runtime

    write_tree(tmp_path / "share", {"pgp": SHARE["pgp"], "README": SHARE["README"]})
    runtime = Runtime.open(settings.model_copy(update={"convert_isolation": True,
                                                       "convert_workers": 1}))
    try:
        summary = run_plain([parse_root(str(tmp_path / "share"))], runtime=runtime).to_dict()
        stored = _stored_texts(runtime)
    finally:
        runtime.close()
    assert [f["error"] for f in summary["failures"]] == ["SecretDetected"], summary
    assert summary["added"] == 1 and B64[:32] not in stored


def test_add_text_refuses_a_secret_and_redacts_on_request(settings, caplog):
    text = f"# Ops notes\n\nThe deploy key:\n\n{RSA}"
    with pytest.raises(SecretDetected) as caught:
        api.add_text(text, "notes/ops", settings=settings)
    assert "notes/ops" in str(caught.value) and "pem-private-key at line 5" in str(caught.value)
    assert B64[:32] not in str(caught.value)
    redacting = settings.model_copy(update={"secrets": "redact"})
    result = api.add_text(text, "notes/ops", settings=redacting)
    assert result.status == "added"
    hits = api.search("deploy key", settings=redacting, k=3).results
    assert hits and all(B64[:32] not in h.text for h in hits)
    assert any("[REDACTED:pem-private-key]" in h.text for h in hits)
    assert B64[:32] not in caplog.text


def test_the_setting_is_read_and_checked(monkeypatch, settings):
    from kbsync.errors import UsageError
    from kbsync.settings import load_settings

    assert IngestConfig.from_settings(settings).secrets is SecretPolicy.REFUSE
    monkeypatch.setenv("KBSYNC_SECRETS", "redact")
    assert IngestConfig.from_settings(Settings()).secrets is SecretPolicy.REDACT
    monkeypatch.setenv("KBSYNC_SECRETS", "ignore")
    with pytest.raises(UsageError, match="KBSYNC_SECRETS"):
        load_settings()
