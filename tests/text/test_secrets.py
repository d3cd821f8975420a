"""Issue 37: the one secret detector (kbsync.text.secrets): each kind is found anywhere in
a text and redacted without a trace; prose about passwords and tokens is not a secret."""

from __future__ import annotations

import pytest

from kbsync.errors import ErrorCode, PermanentError, SecretDetected
from kbsync.text.secrets import (DETECTORS, SecretPolicy, find_secrets, redact, screen)

# Made-up values of real shapes (none is a live credential).
B64 = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun"
PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{B64}\n{B64[::-1]}\n-----END RSA PRIVATE KEY-----\n"
SECRET_VALUE = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzQ8Hj3mN2p"

POSITIVES = {
    "pem-private-key": PEM,
    "pem-lower-case": PEM.lower(),
    "pkcs8": PEM.replace("RSA PRIVATE", "PRIVATE"),
    "encrypted-pem": (PEM.replace("RSA PRIVATE", "ENCRYPTED PRIVATE")),
    "pem-with-headers": PEM.replace(f"-----\n{B64}", f"-----\nProc-Type: 4,ENCRYPTED\n"
                                    f"DEK-Info: AES-128-CBC,5E32\n\n{B64}", 1),
    "openssh-private-key": (f"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA{B64}\n"
                            "-----END OPENSSH PRIVATE KEY-----\n"),
    "pgp-private-key": (f"-----BEGIN PGP PRIVATE KEY BLOCK-----\nVersion: GnuPG v2\n\n"
                        f"lQOYBF{B64}\n=Xy12\n-----END PGP PRIVATE KEY BLOCK-----\n"),
    "putty-private-key": ("PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\n"
                          "Comment: ed25519-key\nPublic-Lines: 2\nAAAAC3NzaC1lZDI1NTE5AAAA\n"
                          f"Private-Lines: 1\nAAAAI{B64[:40]}\nPrivate-MAC: 8d2a0c3b1f\n"),
    "private-key-json": (f'{{"private_key": "-----BEGIN PRIVATE KEY-----\\n{B64}\\n'
                         '-----END PRIVATE KEY-----\\n",\n "client_email": "x@y.iam"}\n'),
    "aws-access-key-id": "aws_access_key_id = AKIAZ3QPLM7TXK2W4RNB\n",
    "github-token": "The CI uses ghp_4Zk9QmV2xTb7LrN0cW8yHs3Jd6Fp1Ga5Ue2Y for pushes.\n",
    "slack-token": "bot: xoxb-2841-99812-Zk9QmV2xTb7LrN0cW8yHs3\n",
    "url-password": "DATABASE_URL is postgres://app:Zk9QmV2xTb7@db.internal:5432/app\n",
    "env-aws-secret": f"AWS_SECRET_ACCESS_KEY={SECRET_VALUE}\n",
    "env-export": "export GITLAB_API_TOKEN=Zk9QmV2xTb7LrN0c\n",
    "env-quoted": 'DB_PASSWORD="s3cr3t-Pa55w0rd"\n',
    "yaml-kubeconfig-token": ("apiVersion: v1\nusers:\n- name: admin\n  user:\n"
                              "    token: kq3v9Zp1x7Lm2Nw8Rt4Yb6Hc0Dd5Fg\n"),
    "yaml-client-key-data": "    client-key-data: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQo=\n",
    "json-password": '  "password": "Tr0ub4dor&3x",\n',
}


@pytest.mark.parametrize("name", sorted(POSITIVES))
def test_each_kind_is_found_anywhere_and_redacted_without_a_trace(name):
    secret = POSITIVES[name]
    prose = "Debian keeps its documentation under /usr/share/doc.\n" * 180  # > 9,000 bytes
    text = prose + secret + "The end.\n"
    assert len(prose.encode()) > 9000
    findings = find_secrets(text)
    assert len(findings) == 1, (name, findings)
    assert findings[0].line == 180 + find_secrets(secret)[0].line, findings  # counted in text
    redacted, _ = redact(text, findings)
    assert f"[REDACTED:{findings[0].kind}]" in redacted
    assert redacted.startswith(prose) and redacted.endswith("The end.\n")
    for token in (B64[:24], "AKIAZ3QPLM7TXK2W4RNB", "Zk9QmV2xTb7", SECRET_VALUE,
                  "kq3v9Zp1x7", "s3cr3t-Pa55w0rd", "Tr0ub4dor", "LS0tLS1CRUdJTi"):
        assert token not in redacted and token.lower() not in redacted


def test_the_kinds_are_named_as_in_the_table():
    kinds = {finding.kind for text in POSITIVES.values() for finding in find_secrets(text)}
    assert kinds <= {d.kind for d in DETECTORS}
    assert {"pem-private-key", "openssh-private-key", "pgp-private-key", "putty-private-key",
            "private-key-json", "aws-access-key-id", "secret-assignment"} <= kinds


PROSE = [
    # real shapes of Debian documentation and READMEs about passwords and tokens
    "To change your password, run passwd(1) and type the new password twice.\n",
    "set PASSWORD=<your password> before running the script.\n",
    "PASSWORD=\n",
    "export API_TOKEN=${API_TOKEN}\n",
    "DB_PASSWORD=changeme\n",
    "SECRET_KEY=xxxxxxxxxxxxxxxx\n",
    "GITHUB_TOKEN=...\n",
    "password: <your password>\n",
    "Password: the password of the administrator account\n",
    "token: CARD32\n",
    "max_tokens: 512\n",
    "password_file: /etc/kbsync/password\n",
    "    password = getpass.getpass()\n",
    "    api_key = os.environ[\"API_KEY\"]\n",
    "    token = self.token\n",
    "auth_token_url: https://example.org/oauth/token\n",
    "PASSWORD_MIN_LENGTH=12\n",
    "if token == expected:\n",
    "The access key id looks like AKIAIOSFODNN7EXAMPLE in the AWS docs.\n",
    "-----BEGIN RSA PRIVATE KEY-----\n...\n-----END RSA PRIVATE KEY-----\n",
    "A PEM file starts with -----BEGIN PRIVATE KEY----- and ends with its END line.\n",
    "Connect with ftp://user:password@ftp.example.org/ and give your credentials.\n",
    "Set the token: see below.\n",
    "# Tokens\nA token is a string the server hands out; keep it secret.\n",
    ("The passphrase protects the secret key. If you forget your passphrase, the key is "
     "lost: gpg cannot recover it. Use a long passphrase made of several words.\n"),
    # names in real Python sources (SQLAlchemy, pydantic, Prefect): 15 of 3,732 files of
    # their packages were refused as holding a secret before code names were told apart
    "    _bulk_replace_token: AttributeEventToken\n",
    "        file_secret_settings: PydanticBaseSettingsSource,\n",
    "                    reservation_token=reservation_token,\n",
    "            self._limiter.total_tokens = effective_max_concurrency\n",
    "    SECRET_NAME_VAR: DEFAULT_SECRET_NAME\n",
    '            "wallet_password": "top secret",  # password for the PEM file\n',
]


@pytest.mark.parametrize("text", PROSE)
def test_prose_about_passwords_and_tokens_is_not_a_secret(text):
    assert find_secrets(text) == []


def test_a_real_paragraph_of_debian_documentation_is_not_flagged():
    paragraph = (
        "The root password is set during installation. If you leave it empty, the root\n"
        "account is disabled and the first user gets sudo rights instead. The password is\n"
        "stored hashed in /etc/shadow; the PASSWORD field of /etc/passwd holds an 'x'.\n\n"
        "    $ sudo passwd root\n    New password:\n    Retype new password:\n\n"
        "An API token for the bug tracker is created in your account settings; store it in\n"
        "~/.config/reportbug/token (mode 0600) and never in a shared file.\n"
        "SECRET_KEY: a random string of 50 characters (see the Django documentation).\n")
    assert find_secrets(paragraph) == []


def test_refuse_names_the_kind_and_line_never_the_secret():
    text = "intro\n" * 3 + f"AWS_SECRET_ACCESS_KEY={SECRET_VALUE}\n"
    with pytest.raises(SecretDetected) as caught:
        screen(text, name="share/env", policy=SecretPolicy.REFUSE)
    message = str(caught.value)
    assert "share/env" in message and "secret-assignment at line 4" in message
    assert SECRET_VALUE not in message
    assert caught.value.kind is ErrorCode.SecretDetected
    assert isinstance(caught.value, PermanentError)


def test_redact_keeps_the_text_and_moves_page_offsets(caplog):
    page1, page2 = "Page one.\n", f"Page two.\n{PEM}after\n"
    text = page1 + page2 + "Page three.\n"
    offsets = [0, len(page1), len(page1 + page2)]
    redacted, moved = screen(text, name="scan.pdf", policy=SecretPolicy.REDACT, offsets=offsets)
    assert redacted == "Page one.\nPage two.\n[REDACTED:pem-private-key]\nafter\nPage three.\n"
    assert [redacted[o:o + 10] for o in moved] == ["Page one.\n", "Page two.\n", "Page three"]
    assert "scan.pdf" in caplog.text and "pem-private-key at line 3" in caplog.text
    assert B64[:20] not in caplog.text


def test_a_key_across_a_page_break_leaves_a_marker_on_each_page():
    text = f"one\n{PEM}two\n"
    cut = text.index(B64[::-1])  # page 2 starts inside the key
    redacted, moved = redact(text, find_secrets(text), [0, cut])
    assert moved[0] == 0 and moved[1] > 0
    assert redacted[moved[1]:].startswith("[REDACTED:pem-private-key]")
    assert redacted.count("[REDACTED:pem-private-key]") == 2 and B64[:20] not in redacted


def test_a_text_without_a_secret_comes_back_as_is():
    text = "Nothing to hide here.\n"
    assert screen(text, name="a.txt", policy=SecretPolicy.REFUSE) == (text, [])
